// Command chat is a real-time chat: Centrifuge nodes whose messages travel
// between them through shardcast, which also keeps each room's history and
// who is in it in Redis: one shardcast engine, on a Redis Cluster or on
// standalone instances, is each node's broker and presence manager. Each
// node serves a page that connects over WebSocket to that node, so two
// browser windows on two nodes chat through Redis.
//
//	make chat                          # local 3×1 Redis Cluster and three nodes
//	make chat ARGS='-engine sharded'   # three local standalone instances
//	go run . -cluster 10.0.0.1:7000 -port 8000 -nodes 1
//	go run . -engine sharded -shards 10.0.0.1:6379,10.0.0.2:6379
//
// The page's client library comes from npm (make chat-web installs it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardcast/shardcast/examples/localredis"
)

func main() {
	nodes := flag.Int("nodes", 3, "how many chat nodes to run")
	engine := flag.String("engine", engineCluster, engineCluster+" (a Redis Cluster) or "+engineSharded+" (standalone Redis instances)")
	cluster := flag.String("cluster", "", "cluster: seed addresses of your Redis Cluster, comma-separated (default: start a local cluster of 3 masters and 3 replicas)")
	shards := flag.String("shards", "", "sharded: your Redis instances, comma-separated, in the same order for every node (default: start 3 local instances)")
	host := flag.String("host", "127.0.0.1", "address the nodes listen on")
	port := flag.Int("port", 0, "port of the first node, the others take the ports after it; 0 lets the system pick")
	client := flag.String("client", "web/node_modules/centrifuge/dist/centrifuge.js", "path of the npm-installed browser client")
	flag.Parse()

	redis, err := redisFromFlags(*engine, *cluster, *shards)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *nodes, redis, *host, *port, *client); err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(1)
	}
}

// redisFromFlags returns the engine and Redis that the -engine, -cluster
// and -shards flags name; no addresses means a local Redis, to start. The
// addresses of the other engine's flag are refused rather than ignored.
func redisFromFlags(engine, cluster, shards string) (redisConfig, error) {
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	switch engine {
	case engineCluster:
		if shards != "" {
			return redisConfig{}, errors.New("-shards is for -engine sharded; a cluster's seeds go in -cluster")
		}
		return redisConfig{Engine: engine, Addrs: split(cluster)}, nil
	case engineSharded:
		if cluster != "" {
			return redisConfig{}, errors.New("-cluster is for -engine cluster; standalone instances go in -shards")
		}
		return redisConfig{Engine: engine, Addrs: split(shards)}, nil
	}
	return redisConfig{}, fmt.Errorf("-engine %q: want %s", engine, strings.Join(engines, " or "))
}

// run runs n nodes on redis, starting a local Redis first if redis has no
// addresses, until ctx ends.
func run(ctx context.Context, n int, redis redisConfig, host string, port int, client string) error {
	if len(redis.Addrs) == 0 {
		fmt.Printf("starting %s…\n", localRedisName[redis.Engine])
		local, stop, err := startLocalRedis(ctx, redis.Engine)
		if err != nil {
			return err
		}
		defer func() {
			stop()
			fmt.Println("local Redis stopped")
		}()
		redis = local
		fmt.Println("local Redis up:", strings.Join(redis.Addrs, " "))
	}

	running, err := startNodes(redis, n, host, port, client, slog.Default())
	if err != nil {
		return err
	}
	defer running.stop()
	for _, r := range running {
		fmt.Printf("%s: %s\n", r.name, r.url)
	}
	if len(running) > 1 {
		fmt.Printf("open %s and %s in two windows; Ctrl-C stops everything\n", running[0].url, running[1].url)
	}
	<-ctx.Done()
	fmt.Println("stopping…")
	return nil
}

// runningNode is a chat node serving HTTP on url.
type runningNode struct {
	name string
	url  string
	chat *chatNode
	srv  *http.Server
	done chan struct{} // closed once Serve returned
}

type runningNodes []*runningNode

// startNodes runs n chat nodes on the engine and Redis of redis, listening
// on host at port, port+1, … (free ports if port is 0).
func startNodes(redis redisConfig, n int, host string, port int, client string, logger *slog.Logger) (_ runningNodes, err error) {
	var running runningNodes
	defer func() {
		if err != nil {
			running.stop()
		}
	}()
	for i := range n {
		name := fmt.Sprintf("node-%d", i+1)
		p := 0
		if port != 0 {
			p = port + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return nil, err
		}
		chat, err := newChatNode(nodeConfig{Name: name, Redis: redis, Client: client, Logger: logger})
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r := &runningNode{
			name: name,
			url:  "http://" + ln.Addr().String(),
			chat: chat,
			srv:  &http.Server{Handler: chat, ReadHeaderTimeout: 10 * time.Second},
			done: make(chan struct{}),
		}
		go func() {
			defer close(r.done)
			if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("serve", "node", name, "error", err)
			}
		}()
		running = append(running, r)
	}
	return running, nil
}

// stop disconnects every client, stops every node and its HTTP server, and
// waits for them.
func (rs runningNodes) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range rs {
		_ = r.chat.Close(ctx)
		_ = r.srv.Shutdown(ctx)
		<-r.done
	}
}

// localRedisName says what startLocalRedis starts for each engine.
var localRedisName = map[string]string{
	engineCluster: "a local Redis Cluster (3 masters, 3 replicas)",
	engineSharded: "3 local standalone Redis instances",
}

// startLocalRedis starts, from redis-server and redis-cli on PATH, a local
// Redis for engine (see localRedisName) and returns where it is and the
// function that stops it.
func startLocalRedis(ctx context.Context, engine string) (_ redisConfig, stop func(), err error) {
	servers, err := localredis.New("chat")
	if err != nil {
		return redisConfig{}, nil, err
	}
	redis := redisConfig{Engine: engine}
	switch engine {
	case engineCluster:
		redis.Addrs, err = servers.Cluster(ctx, 3, 1)
	case engineSharded:
		redis.Addrs, err = servers.Standalone(ctx, 3)
	default:
		err = fmt.Errorf("unknown engine %q", engine)
	}
	if err != nil {
		servers.Stop()
		return redisConfig{}, nil, err
	}
	return redis, servers.Stop, nil
}
