//go:build !redistest_docker

package redistest

import (
	"context"
	"errors"
	"fmt"
)

// errDockerNotBuilt explains how to get the Docker backend. It is behind a
// build tag so that ordinary test binaries neither link testcontainers-go
// nor run its package initialisers (which scan the process table).
var errDockerNotBuilt = errors.New("redistest: " + BackendEnv + "=docker needs a test binary built with -tags redistest_docker")

func dockerAvailable() error { return errDockerNotBuilt }

func startDocker(context.Context, env, string, options) (*Server, error) {
	return nil, fmt.Errorf("start container: %w", errDockerNotBuilt)
}
