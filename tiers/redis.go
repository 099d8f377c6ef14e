package tiers

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// WrapUnavailable marks failures that mean Redis could not answer (network,
// timeout, a node loading or failing over) as ErrUnavailable, so the caller
// applies the fail mode; other Redis error replies stay plain errors.
func WrapUnavailable(err error) error {
	var re redis.Error
	if errors.As(err, &re) && !transient(re.Error()) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func transient(msg string) bool {
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
