// The Curator 5.4 side of bench/run: the same subcommands and output as the Rust benchmark (recipes-bench).
//
//   CuratorBench uncontended SERVERS RECIPE ITERS      median_us=.. p99_us=..
//   CuratorBench contended SERVERS CLIENTS SECONDS [SESSIONS [RECIPE]]
//                                                      handoffs_per_s=..
//   CuratorBench semaphore SERVERS CLIENTS PERMITS SECONDS
//                                                      grants_per_s=.. requests_per_grant=.. left_nodes=..
//   CuratorBench multi SERVERS MEMBERS ITERS           median_us=.. p99_us=.. acquire_median_us=.. release_median_us=..
//                                                      requests_per_op=.. left_nodes=..
//   CuratorBench drain SERVERS WAITERS SESSIONS        drain_ms=.. requests_per_handoff=..
//   CuratorBench memory SERVERS WAITERS                bytes_per_waiter=..
//
// Recipes: fair = InterProcessMutex, exclusive = InterProcessSemaphoreMutex (Curator's non-reentrant mutex),
// read / write = InterProcessReadWriteLock. semaphore: InterProcessSemaphoreV2 (acquire() a Lease, returnLease),
// one CuratorFramework per contender; multi: InterProcessMultiLock over MEMBERS paths (an InterProcessMutex each).

import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

public class CuratorBench {
    static CuratorFramework client(String servers) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(servers, 30000, 10000, new RetryNTimes(3, 100));
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) throw new IllegalStateException("not connected");
        return c;
    }

    static String unique(String name) {
        return "/bench/curator-" + name + "-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
    }

    static InterProcessLock lock(CuratorFramework c, String path, String recipe) {
        switch (recipe) {
            case "fair": return new InterProcessMutex(c, path);
            case "exclusive": return new InterProcessSemaphoreMutex(c, path);
            case "read": return new InterProcessReadWriteLock(c, path).readLock();
            case "write": return new InterProcessReadWriteLock(c, path).writeLock();
            default: throw new IllegalArgumentException(recipe);
        }
    }

    static long packetsReceived(String servers) throws Exception {
        String first = servers.split(",")[0].split("/")[0];
        String[] hp = first.split(":");
        try (Socket s = new Socket(hp[0], Integer.parseInt(hp[1]))) {
            OutputStream out = s.getOutputStream();
            out.write("mntr".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            String text = new String(in.readAllBytes(), StandardCharsets.US_ASCII);
            for (String line : text.split("\n")) {
                if (line.startsWith("zk_packets_received")) return Long.parseLong(line.split("\\s+")[1].trim());
            }
        }
        throw new IllegalStateException("no zk_packets_received in mntr");
    }

    static long rss() throws Exception {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        }
        return 0;
    }

    /** The nodes under path (its whole subtree, path itself not counted), or 0 when it is gone. */
    static int descendants(CuratorFramework c, String path) throws Exception {
        List<String> children;
        try { children = c.getChildren().forPath(path); } catch (org.apache.zookeeper.KeeperException.NoNodeException e) { return 0; }
        int n = children.size();
        for (String child : children) n += descendants(c, path + "/" + child);
        return n;
    }

    /** Deletes path and everything under it (a missing node is fine). */
    static void remove(CuratorFramework c, String path) throws Exception {
        try { c.delete().deletingChildrenIfNeeded().forPath(path); } catch (org.apache.zookeeper.KeeperException.NoNodeException e) { }
    }

    static void waitChildren(CuratorFramework c, String path, int n) throws Exception {
        long deadline = System.currentTimeMillis() + 600_000;
        while (true) {
            List<String> children;
            try { children = c.getChildren().forPath(path); } catch (Exception e) { children = List.of(); }
            if (children.size() >= n) return;
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("waiters never queued");
            Thread.sleep(20);
        }
    }

    public static void main(String[] a) throws Exception {
        String figure = a[0], servers = a[1];
        switch (figure) {
            case "uncontended": {
                String recipe = a[2];
                int iters = Integer.parseInt(a[3]);
                CuratorFramework c = client(servers);
                String path = unique("uncontended-" + recipe);
                c.create().creatingParentsIfNeeded().forPath(path);
                InterProcessLock l = lock(c, path, recipe);
                for (int i = 0; i < iters / 5; i++) { l.acquire(); l.release(); }
                double[] us = new double[iters];
                for (int i = 0; i < iters; i++) {
                    long t0 = System.nanoTime();
                    l.acquire();
                    l.release();
                    us[i] = (System.nanoTime() - t0) / 1e3;
                }
                Arrays.sort(us);
                System.out.printf("median_us=%.1f p99_us=%.1f%n", us[(int) Math.round((iters - 1) * 0.5)], us[(int) Math.round((iters - 1) * 0.99)]);
                c.close();
                break;
            }
            case "contended": {
                int clients = Integer.parseInt(a[2]);
                double seconds = Double.parseDouble(a[3]);
                // Sessions the threads share (thread i uses client i mod S); 0 or absent: one client per thread.
                int sessions = a.length > 4 ? Integer.parseInt(a[4]) : 0;
                if (sessions <= 0 || sessions > clients) sessions = clients;
                String recipe = a.length > 5 ? a[5] : "fair";
                String path = unique("contended-" + recipe + "-" + clients);
                AtomicLong count = new AtomicLong();
                AtomicBoolean stop = new AtomicBoolean(), measuring = new AtomicBoolean();
                List<Thread> threads = new ArrayList<>();
                List<CuratorFramework> cs = new ArrayList<>();
                for (int i = 0; i < sessions; i++) cs.add(client(servers));
                for (int i = 0; i < clients; i++) {
                    CuratorFramework c = cs.get(i % sessions);
                    InterProcessLock l = lock(c, path, recipe);
                    Thread t = new Thread(() -> {
                        try {
                            while (!stop.get()) {
                                l.acquire();
                                if (measuring.get()) count.incrementAndGet();
                                l.release();
                            }
                        } catch (Exception e) { throw new RuntimeException(e); }
                    });
                    threads.add(t);
                    t.start();
                }
                Thread.sleep(500);
                measuring.set(true);
                long t0 = System.nanoTime();
                Thread.sleep((long) (seconds * 1000));
                measuring.set(false);
                long n = count.get();
                double elapsed = (System.nanoTime() - t0) / 1e9;
                stop.set(true);
                for (Thread t : threads) t.join();
                System.out.printf("handoffs_per_s=%.1f%n", n / elapsed);
                for (CuratorFramework c : cs) c.close();
                break;
            }
            case "semaphore": {
                int clients = Integer.parseInt(a[2]);
                int permits = Integer.parseInt(a[3]);
                double seconds = Double.parseDouble(a[4]);
                String path = unique("semaphore-" + permits + "of" + clients);
                AtomicLong count = new AtomicLong();
                AtomicBoolean stop = new AtomicBoolean(), measuring = new AtomicBoolean();
                List<Thread> threads = new ArrayList<>();
                List<CuratorFramework> cs = new ArrayList<>();
                for (int i = 0; i < clients; i++) cs.add(client(servers));
                for (int i = 0; i < clients; i++) {
                    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(cs.get(i), path, permits);
                    Thread t = new Thread(() -> {
                        try {
                            while (!stop.get()) {
                                Lease lease = s.acquire();
                                if (measuring.get()) count.incrementAndGet();
                                s.returnLease(lease);
                            }
                        } catch (Exception e) { throw new RuntimeException(e); }
                    });
                    threads.add(t);
                    t.start();
                }
                Thread.sleep(500);
                long before = packetsReceived(servers);
                measuring.set(true);
                long t0 = System.nanoTime();
                Thread.sleep((long) (seconds * 1000));
                measuring.set(false);
                long n = count.get();
                double elapsed = (System.nanoTime() - t0) / 1e9;
                long after = packetsReceived(servers);
                stop.set(true);
                for (Thread t : threads) t.join();
                // Curator keeps its lock and lease queues as two child nodes (containers) of the path: count what is
                // under them, not them.
                int left = descendants(cs.get(0), path + "/locks") + descendants(cs.get(0), path + "/leases");
                remove(cs.get(0), path);
                System.out.printf("grants_per_s=%.1f requests_per_grant=%.2f left_nodes=%d%n", n / elapsed, (after - before) / (double) Math.max(1, n), left);
                for (CuratorFramework c : cs) c.close();
                break;
            }
            case "multi": {
                int members = Integer.parseInt(a[2]);
                int iters = Integer.parseInt(a[3]);
                CuratorFramework c = client(servers);
                String base = unique("multi-" + members);
                List<String> paths = new ArrayList<>();
                for (int i = 0; i < members; i++) {
                    paths.add(base + "/m" + i);
                    c.create().creatingParentsIfNeeded().forPath(base + "/m" + i);
                }
                InterProcessMultiLock l = new InterProcessMultiLock(c, paths);
                for (int i = 0; i < iters / 5; i++) { l.acquire(); l.release(); }
                // The whole acquire + release, and its two halves apart (to see which bounds it).
                double[] us = new double[iters], acq = new double[iters], rel = new double[iters];
                long before = packetsReceived(servers);
                for (int i = 0; i < iters; i++) {
                    long t0 = System.nanoTime();
                    l.acquire();
                    long t1 = System.nanoTime();
                    l.release();
                    long t2 = System.nanoTime();
                    us[i] = (t2 - t0) / 1e3;
                    acq[i] = (t1 - t0) / 1e3;
                    rel[i] = (t2 - t1) / 1e3;
                }
                long after = packetsReceived(servers);
                int left = descendants(c, base) - members;
                remove(c, base);
                Arrays.sort(us);
                Arrays.sort(acq);
                Arrays.sort(rel);
                int mid = (int) Math.round((iters - 1) * 0.5);
                System.out.printf("median_us=%.1f p99_us=%.1f acquire_median_us=%.1f release_median_us=%.1f requests_per_op=%.2f left_nodes=%d%n",
                        us[mid], us[(int) Math.round((iters - 1) * 0.99)], acq[mid], rel[mid], (after - before) / (double) iters, left);
                c.close();
                break;
            }
            case "drain": {
                int waiters = Integer.parseInt(a[2]);
                int sessions = Integer.parseInt(a[3]);
                String path = unique("drain-" + waiters);
                CuratorFramework holder = client(servers);
                InterProcessMutex h = new InterProcessMutex(holder, path);
                h.acquire();
                List<CuratorFramework> pool = new ArrayList<>();
                for (int i = 0; i < sessions; i++) pool.add(client(servers));
                CountDownLatch done = new CountDownLatch(waiters);
                AtomicLong finished = new AtomicLong();
                for (int i = 0; i < waiters; i++) {
                    InterProcessMutex l = new InterProcessMutex(pool.get(i % sessions), path);
                    Thread t = new Thread(null, () -> {
                        try {
                            l.acquire();
                            l.release();
                            finished.set(System.nanoTime());
                            done.countDown();
                        } catch (Exception e) { throw new RuntimeException(e); }
                    }, "waiter", 256 * 1024);
                    t.start();
                }
                waitChildren(holder, path, waiters + 1);
                Thread.sleep(200);
                long before = packetsReceived(servers);
                long t0 = System.nanoTime();
                h.release();
                done.await();
                long t1 = finished.get();
                long after = packetsReceived(servers);
                System.out.printf("drain_ms=%.1f requests_per_handoff=%.2f%n", (t1 - t0) / 1e6, (after - before) / (double) waiters);
                for (CuratorFramework c : pool) c.close();
                holder.close();
                break;
            }
            case "memory": {
                int waiters = Integer.parseInt(a[2]);
                String path = unique("memory-" + waiters);
                CuratorFramework holder = client(servers);
                InterProcessMutex h = new InterProcessMutex(holder, path);
                h.acquire();
                CuratorFramework c = client(servers);
                List<Thread> threads = new ArrayList<>();
                Runnable waiter = () -> {
                    try {
                        InterProcessMutex l = new InterProcessMutex(c, path);
                        l.acquire();
                        l.release();
                    } catch (Exception e) { throw new RuntimeException(e); }
                };
                for (int i = 0; i < 10; i++) { Thread t = new Thread(waiter); threads.add(t); t.start(); }
                waitChildren(holder, path, 11);
                System.gc();
                Thread.sleep(300);
                long before = rss();
                for (int batch = 0; batch * 100 < waiters; batch++) {
                    int n = Math.min(100, waiters - batch * 100);
                    for (int i = 0; i < n; i++) { Thread t = new Thread(waiter); threads.add(t); t.start(); }
                    waitChildren(holder, path, batch * 100 + n + 11);
                }
                System.gc();
                Thread.sleep(500);
                long after = rss();
                System.out.printf("bytes_per_waiter=%.0f%n", Math.max(0, after - before) / (double) waiters);
                h.release();
                for (Thread t : threads) t.join();
                c.close();
                holder.close();
                break;
            }
            default:
                throw new IllegalArgumentException(figure);
        }
        System.exit(0);
    }
}
