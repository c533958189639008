// Command chat is a real-time chat: Centrifuge nodes whose messages travel
// between them through shardcast over a Redis Cluster, with presence kept in
// the same cluster by Centrifuge's Redis presence manager. Each node serves
// a page that connects over WebSocket to that node, so two browser windows
// on two nodes chat through Redis.
//
//	make chat                          # local 3×1 Redis Cluster and three nodes
//	go run . -cluster 10.0.0.1:7000 -port 8000 -nodes 1
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
	cluster := flag.String("cluster", "", "seed addresses of your Redis Cluster, comma-separated; empty starts a local cluster of 3 masters and 3 replicas")
	host := flag.String("host", "127.0.0.1", "address the nodes listen on")
	port := flag.Int("port", 0, "port of the first node, the others take the ports after it; 0 lets the system pick")
	client := flag.String("client", "web/node_modules/centrifuge/dist/centrifuge.js", "path of the npm-installed browser client")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *nodes, *cluster, *host, *port, *client); err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, clusterAddrs, host string, port int, client string) error {
	var addrs []string
	if clusterAddrs != "" {
		addrs = strings.Split(clusterAddrs, ",")
	} else {
		fmt.Println("starting a local Redis Cluster (3 masters, 3 replicas)…")
		local, stop, err := startLocalCluster(ctx)
		if err != nil {
			return err
		}
		defer func() {
			stop()
			fmt.Println("Redis Cluster stopped")
		}()
		addrs = local
		fmt.Println("Redis Cluster up:", strings.Join(addrs, " "))
	}

	running, err := startNodes(addrs, n, host, port, client, slog.Default())
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

// startNodes runs n chat nodes against the cluster at addrs, listening on
// host at port, port+1, … (free ports if port is 0).
func startNodes(addrs []string, n int, host string, port int, client string, logger *slog.Logger) (_ runningNodes, err error) {
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
		chat, err := newChatNode(nodeConfig{Name: name, Cluster: addrs, Client: client, Logger: logger})
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

// startLocalCluster starts a local Redis Cluster of 3 masters and 3
// replicas from redis-server and redis-cli on PATH, and returns its nodes'
// addresses and the function that stops it.
func startLocalCluster(ctx context.Context) (addrs []string, stop func(), err error) {
	servers, err := localredis.New("chat")
	if err != nil {
		return nil, nil, err
	}
	if addrs, err = servers.Cluster(ctx, 3, 1); err != nil {
		servers.Stop()
		return nil, nil, err
	}
	return addrs, servers.Stop, nil
}
