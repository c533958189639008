// Package badconfig holds the one error value every configuration error
// wraps. The address parser (internal/redisaddr) returns it and the root
// package exports it as shardcast.ErrInvalidConfig, so the parser needs
// nothing of the package above it and errors.Is holds across both.
package badconfig

import "errors"

// Err is shardcast.ErrInvalidConfig.
var Err = errors.New("shardcast: invalid config")
