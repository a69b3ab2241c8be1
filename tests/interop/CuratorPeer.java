// A Curator 5.4 peer for the interoperability tests: takes an InterProcessMutex or an InterProcessReadWriteLock
// side on PATH a number of times, checking for overlaps through marker files shared with the other processes.
//
// usage: CuratorPeer CONNECT PATH mutex|read|write|selector|semaphoreN COUNT DIR
// (selector: a LeaderSelector, id "java-<pid>", requeued after each leadership, whose takeLeadership enters
// exclusively; COUNT leaderships. latch: a LeaderLatch, id "java-<pid>", started, awaited, entered exclusively while
// it has leadership, closed; COUNT times)
// (semaphoreN: an InterProcessSemaphoreV2 of N leases; a holder makes a file under DIR/S and counts the files there:
// more than N is an overlap; prints "acquisitions N overlaps M most K", K the most holders it saw in at once)
// (selector-hold, latch-hold: the same candidate, which leads once and holds leadership until the process is killed:
// entered exclusively, DIR/leader-<pid> made; an overlap makes DIR/overlap-<pid> at once, since a killed peer prints
// nothing. Leadership lost with the connection removes both, as a careful application stops. The session timeout is
// PEER_SESSION_MS, 10000 when unset)
// DIR/ready-<pid> is created once connected; DIR/go is awaited before starting (at most 60 s).
// Prints "acquisitions N overlaps M" and exits 0 (3 on overlaps).
//
// Revocation (Curator's Revoker protocol):
//   CuratorPeer CONNECT PATH revocable 0 DIR  holds an InterProcessMutex made revocable, creates DIR/held-<node name>,
//                                             releases when asked to let go, prints "revoked" (exit 75: not asked
//                                             within 60 s)
//   CuratorPeer CONNECT NODE revoke 0 DIR     Revoker.attemptRevoke on the lock node NODE (a full path)

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.RetryNTimes;

public class CuratorPeer {
    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], role = args[2];
        int count = Integer.parseInt(args[3]);
        File dir = new File(args[4]);
        String sessionMs = System.getenv("PEER_SESSION_MS");
        int session = sessionMs == null ? 10000 : Integer.parseInt(sessionMs);
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, session, 5000, new RetryNTimes(5, 100));
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            System.err.println("not connected");
            System.exit(69);
        }
        if (role.equals("revoke")) {
            Revoker.attemptRevoke(client, path);
            client.close();
            System.out.println("asked");
            System.exit(0);
        }
        if (role.equals("revocable")) {
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            CountDownLatch asked = new CountDownLatch(1);
            mutex.makeRevocable(forLock -> asked.countDown());
            if (!mutex.acquire(60, TimeUnit.SECONDS)) {
                System.err.println("acquire timed out");
                System.exit(75);
            }
            String node = null;
            for (String child : client.getChildren().forPath(path)) {
                if (client.checkExists().forPath(path + "/" + child).getEphemeralOwner()
                        == client.getZookeeperClient().getZooKeeper().getSessionId()) {
                    node = child;
                }
            }
            new File(dir, "held-" + node).createNewFile();
            boolean revoked = asked.await(60, TimeUnit.SECONDS);
            mutex.release();
            client.close();
            System.out.println(revoked ? "revoked" : "not asked");
            System.exit(revoked ? 0 : 75);
        }
        if (role.equals("selector-hold") || role.equals("latch-hold")) {
            System.exit(hold(client, path, role.startsWith("latch"), dir));
        }
        if (role.equals("selector")) {
            System.exit(selector(client, path, count, dir));
        }
        if (role.equals("latch")) {
            System.exit(latch(client, path, count, dir));
        }
        if (role.startsWith("semaphore")) {
            System.exit(semaphore(client, path, Integer.parseInt(role.substring(9)), count, dir));
        }
        InterProcessLock lock;
        if (role.equals("mutex")) {
            lock = new InterProcessMutex(client, path);
        } else if (role.equals("read")) {
            lock = new InterProcessReadWriteLock(client, path).readLock();
        } else {
            lock = new InterProcessReadWriteLock(client, path).writeLock();
        }
        awaitGo(dir);
        int overlaps = 0;
        boolean exclusive = !role.equals("read");
        File writer = new File(dir, "W");
        File readers = new File(dir, "R");
        FileOutputStream log = new FileOutputStream(new File(dir, "log"), true);
        byte[] tag = ("java-" + role + "\n").getBytes();
        for (int i = 0; i < count; i++) {
            if (!lock.acquire(60, TimeUnit.SECONDS)) {
                System.err.println("acquire timed out");
                System.exit(75);
            }
            File mine = null;
            if (exclusive) {
                if (!writer.mkdir()) overlaps++;
                String[] r = readers.list();
                if (r != null && r.length > 0) overlaps++;
            } else {
                mine = new File(readers, "java-" + UUID.randomUUID());
                mine.createNewFile();
                if (writer.exists()) overlaps++;
            }
            log.write(tag);
            Thread.sleep(0, 200_000);
            if (exclusive) writer.delete(); else mine.delete();
            lock.release();
        }
        log.close();
        client.close();
        System.out.println("acquisitions " + count + " overlaps " + overlaps);
        System.exit(overlaps == 0 ? 0 : 3);
    }

    static int selector(CuratorFramework client, String path, int count, File dir) throws Exception {
        File writer = new File(dir, "W");
        FileOutputStream log = new FileOutputStream(new File(dir, "log"), true);
        int[] overlaps = {0};
        CountDownLatch done = new CountDownLatch(count);
        LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
            @Override
            public void takeLeadership(CuratorFramework c) throws Exception {
                if (done.getCount() == 0) return; // requeued after the last one: give it back at once
                if (!writer.mkdir()) overlaps[0]++;
                log.write("java-selector\n".getBytes());
                Thread.sleep(0, 200_000);
                writer.delete();
                done.countDown();
            }
        });
        selector.setId("java-" + ProcessHandle.current().pid());
        selector.autoRequeue();
        awaitGo(dir);
        selector.start();
        if (!done.await(120, TimeUnit.SECONDS)) {
            System.err.println("leadership timed out");
            System.exit(75);
        }
        selector.close();
        log.close();
        client.close();
        System.out.println("acquisitions " + count + " overlaps " + overlaps[0]);
        return overlaps[0] == 0 ? 0 : 3;
    }

    static int latch(CuratorFramework client, String path, int count, File dir) throws Exception {
        File writer = new File(dir, "W");
        FileOutputStream log = new FileOutputStream(new File(dir, "log"), true);
        String id = "java-" + ProcessHandle.current().pid();
        int overlaps = 0;
        awaitGo(dir);
        for (int i = 0; i < count; i++) {
            LeaderLatch latch = new LeaderLatch(client, path, id);
            latch.start();
            if (!latch.await(60, TimeUnit.SECONDS)) {
                System.err.println("leadership timed out");
                System.exit(75);
            }
            if (!writer.mkdir()) overlaps++;
            log.write("java-latch\n".getBytes());
            Thread.sleep(0, 200_000);
            writer.delete();
            latch.close();
        }
        log.close();
        client.close();
        System.out.println("acquisitions " + count + " overlaps " + overlaps);
        return overlaps == 0 ? 0 : 3;
    }

    static int hold(CuratorFramework client, String path, boolean asLatch, File dir) throws Exception {
        String id = "java-" + ProcessHandle.current().pid();
        CountDownLatch forever = new CountDownLatch(1);
        awaitGo(dir);
        if (asLatch) {
            LeaderLatch latch = new LeaderLatch(client, path, id);
            // Leadership lost with the connection (a stall under load): leave as a careful application would.
            latch.addListener(new org.apache.curator.framework.recipes.leader.LeaderLatchListener() {
                public void isLeader() {}
                public void notLeader() { leave(dir, id); }
            });
            latch.start();
            latch.await();
            lead(dir, id, "java-latch");
        } else {
            LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework c) throws Exception {
                    lead(dir, id, "java-selector");
                    try {
                        forever.await();
                    } finally {
                        // Interrupted: leadership lost with the connection (the adapter cancels it).
                        leave(dir, id);
                    }
                }
            });
            selector.setId(id);
            selector.start();
        }
        forever.await(300, TimeUnit.SECONDS);
        System.err.println("never killed");
        return 75;
    }

    static void lead(File dir, String id, String tag) throws IOException {
        if (!new File(dir, "W").mkdir()) new File(dir, "overlap-" + id).createNewFile();
        try (FileOutputStream log = new FileOutputStream(new File(dir, "log"), true)) {
            log.write((tag + "\n").getBytes());
        }
        new File(dir, "leader-" + id).createNewFile();
    }

    static void leave(File dir, String id) {
        if (new File(dir, "leader-" + id).delete()) new File(dir, "W").delete();
    }

    static void awaitGo(File dir) throws Exception {
        new File(dir, "ready-" + ProcessHandle.current().pid()).createNewFile();
        long deadline = System.currentTimeMillis() + 60_000;
        while (!new File(dir, "go").exists()) {
            if (System.currentTimeMillis() > deadline) {
                System.err.println("no go signal");
                System.exit(70);
            }
            Thread.sleep(5);
        }
    }

    static int semaphore(CuratorFramework client, String path, int permits, int count, File dir) throws Exception {
        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, permits);
        awaitGo(dir);
        int overlaps = 0, most = 0;
        File holders = new File(dir, "S");
        FileOutputStream log = new FileOutputStream(new File(dir, "log"), true);
        byte[] tag = "java-semaphore\n".getBytes();
        for (int i = 0; i < count; i++) {
            Lease lease = sem.acquire(60, TimeUnit.SECONDS);
            if (lease == null) {
                System.err.println("acquire timed out");
                return 75;
            }
            File mine = new File(holders, "java-" + UUID.randomUUID());
            mine.createNewFile();
            String[] in = holders.list();
            int inside = in == null ? 0 : in.length;
            if (inside > permits) overlaps++;
            most = Math.max(most, inside);
            log.write(tag);
            Thread.sleep(5);
            mine.delete();
            sem.returnLease(lease);
        }
        log.close();
        client.close();
        System.out.println("acquisitions " + count + " overlaps " + overlaps + " most " + most);
        return overlaps == 0 ? 0 : 3;
    }
}
