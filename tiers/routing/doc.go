// Package routing decides checks over the three tiers wherever each cell
// lives: the Router (hot script first, then the warm and cold parts, the
// cold ones grouped per shard), its ColdHints, and the Breaker that fails
// checks fast while a store is down (with ClusterPartition for a Redis
// Cluster). The stores and the directory they share are package tiers'.
package routing
