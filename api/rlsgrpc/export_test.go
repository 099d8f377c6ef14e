package rlsgrpc

// PlatformRequests is platformRequests, for package rlsgrpc_test.
var PlatformRequests = platformRequests
