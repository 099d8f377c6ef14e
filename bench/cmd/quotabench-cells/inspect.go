package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// kindStats sums one kind of key.
type kindStats struct {
	keys, usage, keyLen, size int64
	enc                       map[string]int
	sizes                     map[int64]int // fields (hashes) or bytes (strings): keys with that many
}

// inspect prints, per kind of key of the Redis at addr, what MEMORY USAGE
// says its keys cost (the key's name, its value and Redis' per-key
// structures), beside INFO's used_memory.
func inspect(addr string) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	kinds := map[string]*kindStats{}
	iter := rdb.Scan(ctx, 0, "", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		t, err := rdb.Type(ctx, k).Result()
		if err != nil {
			return err
		}
		kind := "other " + t
		var size int64
		switch {
		case t == "hash" && strings.Contains(k, "}w"):
			kind = "warm bucket"
			size, err = rdb.HLen(ctx, k).Result()
		case t == "string" && strings.HasSuffix(k, "}d"):
			kind = "directory header"
			size, err = rdb.StrLen(ctx, k).Result()
		case t == "string":
			kind = "string (hot counter)"
			size, err = rdb.StrLen(ctx, k).Result()
		}
		if err != nil {
			return err
		}
		usage, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return err
		}
		enc, err := rdb.ObjectEncoding(ctx, k).Result()
		if err != nil {
			return err
		}
		s := kinds[kind]
		if s == nil {
			s = &kindStats{enc: map[string]int{}, sizes: map[int64]int{}}
			kinds[kind] = s
		}
		s.keys++
		s.usage += usage
		s.keyLen += int64(len(k))
		s.size += size
		s.enc[enc]++
		s.sizes[size]++
	}
	if err := iter.Err(); err != nil {
		return err
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(line, "used_memory:") || strings.HasPrefix(line, "used_memory_overhead:") || strings.HasPrefix(line, "used_memory_dataset:") {
			fmt.Println(line)
		}
	}
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := kinds[n]
		sizes := make([]int64, 0, len(s.sizes))
		for z := range s.sizes {
			sizes = append(sizes, z)
		}
		sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
		fmt.Printf("%s: %d keys, MEMORY USAGE %d (%.1f a key), key names %.1f bytes, fields or bytes %d (%.1f a key; min %d, max %d), encodings %v\n",
			n, s.keys, s.usage, float64(s.usage)/float64(s.keys), float64(s.keyLen)/float64(s.keys),
			s.size, float64(s.size)/float64(s.keys), sizes[0], sizes[len(sizes)-1], s.enc)
	}
	return nil
}
