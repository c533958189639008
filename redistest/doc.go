// Package redistest starts real Redis servers and clusters for shardcast's
// tests: standalone instances and M-master × R-replica clusters of
// redis-server processes on loopback, with the faults tests need (SIGKILL,
// SIGSTOP/SIGCONT, restart, failover, slot moves, added and removed
// masters) and ways to look inside (INFO, command counters, CLIENT LIST,
// CLUSTER KEYSLOT). WithTLS starts servers and clusters that speak only
// TLS, with a certificate NewCerts generates; Server.Dial holds a
// connection open, for an admin that must get in once the server refuses
// new clients. StartReplicated starts a standalone master with replicas
// and StartSentinels real Sentinels monitoring such groups, with Failover,
// KillMaster and WaitSwitch for Sentinel failovers.
//
//	func TestFailover(t *testing.T) {
//		c := redistest.StartCluster(t, 3, 1) // ready: state ok, maps agreed, replicas linked
//		old, _ := c.MasterOfSlot(ctx, 0)
//		require.NoError(t, old.Kill())
//		promoted, err := c.WaitFailover(ctx, old)
//		...
//	}
//
// What it guarantees:
//   - Redis is required, never optional: a missing redis-server or
//     redis-cli fails the test with the command that installs them.
//   - Servers are child processes of the test binary, signalled only by
//     their own PID. t.Cleanup kills and reaps them and removes their
//     directories; if the test binary dies, the kernel kills them
//     (Linux). No goroutine of the harness outlives the cleanup.
//   - Ports come from 10000–21999 (cluster bus ports +10000 stay under
//     the ephemeral range). A lock file per port under os.TempDir() keeps
//     test binaries running in parallel apart; the locks die with their
//     process.
//   - Nothing persists: no RDB, no AOF. Cluster nodes use a 1 s node
//     timeout, immediate diskless sync, no replica migration and a
//     replica validity factor of 0, so failovers are fast and happen only
//     where a test causes them.
//   - Every wait is a poll with a deadline, reporting its last unmet
//     condition on timeout.
//
// Servers run through redis-server from PATH, or from the directory the
// SHARDCAST_REDIS_DIR environment variable names (ServerDirEnv), which is
// how the server matrix runs the suites on Valkey and other Redis
// versions; every test binary logs the server it runs on (Build), and
// each start logs its name and version. Standalone servers can run in
// Docker containers instead (SHARDCAST_REDIS_BACKEND=docker, a binary built
// with -tags redistest_docker, and a reachable daemon); clusters cannot.
// Nothing touches Docker unless asked.
//
// Timing on a 2-core machine: a standalone server is ready in about 20 ms,
// a 3×1 or 6×1 cluster in 2.1–2.5 s (a fresh master does not report
// cluster_state:ok until 2 s after it started), and a SIGKILLed master's
// replica takes over in about 2–2.8 s. Share one cluster per package
// (StartSharedCluster in TestMain) for tests that only publish and
// subscribe; give each test that changes the topology its own.
package redistest
