//go:build redistest_docker

package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	tc "github.com/testcontainers/testcontainers-go"
)

// The Docker backend runs standalone servers only, for machines that have a
// Docker daemon but no local redis-server. It is selected by
// SHARDCAST_REDIS_BACKEND=docker in a binary built with -tags
// redistest_docker; nothing reaches for Docker otherwise. Clusters stay on
// the process backend: cluster nodes announce their addresses to each other
// and to clients, which container port mapping would break.

// dockerImage is the server image; 7.0 matches the redis-server the process
// backend is tested with.
const dockerImage = "redis:7.0"

// dockerOpTimeout bounds one daemon call; the first start may pull the image.
const dockerOpTimeout = 3 * time.Minute

const redisContainerPort = "6379/tcp"

func dockerAvailable() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := tc.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("redistest: %s=docker but no Docker daemon is reachable (unset it to use redis-server from PATH): %w",
			BackendEnv, err)
	}
	return cli.Close()
}

// startDocker runs redis in a container whose port 6379 is published on
// 127.0.0.1:<reserved port>, so Restart keeps the address.
func startDocker(ctx context.Context, e env, dir string, o options) (*Server, error) {
	res, err := reservePort()
	if err != nil {
		return nil, err
	}
	inst := &dockerInstance{port: res.port, args: o.args}
	s := &Server{env: e, dir: dir, port: res.port, res: res, inst: inst}
	if err := s.launch(ctx); err != nil {
		desc := inst.describe()
		_ = inst.kill()
		inst.close()
		res.release()
		return nil, fmt.Errorf("%w\n%s", err, desc)
	}
	return s, nil
}

// dockerInstance is one container; calls are serialised by Server.
type dockerInstance struct {
	port int
	args []string

	mu  sync.Mutex
	cli *tc.DockerClient
	ctr *tc.DockerContainer
}

func (d *dockerInstance) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerOpTimeout)
	defer cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctr != nil {
		if err := d.ctr.Start(ctx); err != nil {
			return fmt.Errorf("redistest: restart container: %w", err)
		}
		return nil
	}
	cli, err := tc.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("redistest: docker client: %w", err)
	}
	d.cli = cli
	cmd := append([]string{"redis-server",
		"--save", "", "--appendonly", "no",
		"--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "yes",
		// Port publishing makes our connections come from a bridge
		// address, which protected mode would refuse.
		"--protected-mode", "no",
	}, d.args...)
	binding := network.PortBinding{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(d.port)}
	ctr, err := tc.Run(ctx, dockerImage,
		tc.WithExposedPorts(redisContainerPort),
		tc.WithCmd(cmd...),
		tc.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{network.MustParsePort(redisContainerPort): {binding}}
		}),
	)
	d.ctr = ctr
	if err != nil {
		return fmt.Errorf("redistest: run %s: %w", dockerImage, err)
	}
	return nil
}

// exited cannot be observed without polling the daemon; readiness and
// shutdown waits rely on PING and container state instead.
func (d *dockerInstance) exited() <-chan struct{} { return nil }

func (d *dockerInstance) state(ctx context.Context) (*container.State, error) {
	d.mu.Lock()
	ctr := d.ctr
	d.mu.Unlock()
	if ctr == nil {
		return &container.State{}, nil
	}
	return ctr.State(ctx)
}

func (d *dockerInstance) kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerOpTimeout)
	defer cancel()
	st, err := d.state(ctx)
	if err != nil || !st.Running {
		return err
	}
	if _, err := d.cli.ContainerKill(ctx, d.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("redistest: kill container: %w", err)
	}
	return poll(ctx, func(ctx context.Context) error {
		st, err := d.state(ctx)
		if err == nil && st.Running {
			err = errors.New("container still running")
		}
		return err
	})
}

func (d *dockerInstance) terminate() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerOpTimeout)
	defer cancel()
	st, err := d.state(ctx)
	if err != nil || !st.Running {
		return err
	}
	if st.Paused {
		_ = d.resume()
	}
	timeout := exitWait
	if err := d.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("redistest: stop container: %w", err)
	}
	return nil
}

// pause uses the cgroup freezer (docker pause): like SIGSTOP, the sockets
// stay open and nothing answers.
func (d *dockerInstance) pause() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerOpTimeout)
	defer cancel()
	if _, err := d.cli.ContainerPause(ctx, d.ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("redistest: pause container: %w", err)
	}
	return nil
}

func (d *dockerInstance) resume() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerOpTimeout)
	defer cancel()
	if _, err := d.cli.ContainerUnpause(ctx, d.ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("redistest: unpause container: %w", err)
	}
	return nil
}

// pid is the container's main process as the host sees it.
func (d *dockerInstance) pid() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.state(ctx)
	if err != nil || !st.Running {
		return 0
	}
	return st.Pid
}

func (d *dockerInstance) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.mu.Lock()
	ctr := d.ctr
	d.mu.Unlock()
	if ctr == nil {
		return "container never created"
	}
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("container %s: logs: %v", ctr.GetContainerID(), err)
	}
	defer rc.Close()
	data, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return fmt.Sprintf("container %s (tail):\n%s\n", ctr.GetContainerID(), bytes.Join(lines, []byte("\n")))
}

func (d *dockerInstance) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctr != nil {
		_ = tc.TerminateContainer(d.ctr)
		d.ctr = nil
	}
	if d.cli != nil {
		_ = d.cli.Close()
		d.cli = nil
	}
}
