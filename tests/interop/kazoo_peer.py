"""A kazoo peer for the interoperability tests: takes a kazoo Lock, ReadLock or WriteLock on PATH a number of
times, checking for overlaps through marker files shared with the other processes.

usage: kazoo_peer.py CONNECT PATH mutex|read|write|election|semaphoreN COUNT DIR
(semaphoreN: a kazoo Semaphore of N leases; a holder makes a file under DIR/S and counts the files there: more than N
is an overlap; prints "acquisitions N overlaps M most K", K the most holders it saw in at once)
(election: a kazoo Election, identifier "python-<pid>", whose leadership function enters exclusively COUNT times)
(election-hold: a kazoo Election that leads once and holds leadership until the process is killed: entered
exclusively, DIR/leader-python-<pid> made; an overlap makes DIR/overlap-python-<pid> at once, since a killed peer
prints nothing; a lost connection removes both, as a careful application stops. The session timeout is
PEER_SESSION_MS, 10000 when unset)
DIR/ready-<pid> is created once connected; DIR/go is awaited before starting (at most 60 s).
Prints "acquisitions N overlaps M" and exits 0 (3 on overlaps).
"""
import os
import sys
import time
import uuid

from kazoo.client import KazooClient, KazooState


def main():
    connect, path, role, count, directory = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    zk = KazooClient(hosts=connect, timeout=int(os.environ.get("PEER_SESSION_MS", "10000")) / 1000.0)
    zk.start(timeout=20)
    if role.startswith("semaphore"):
        sys.exit(semaphore(zk, path, int(role[len("semaphore"):]), count, directory))
    if role == "election-hold":
        sys.exit(election_hold(zk, path, directory))
    if role == "election":
        sys.exit(election(zk, path, count, directory))
    if role == "mutex":
        lock = zk.Lock(path)
    elif role == "read":
        lock = zk.ReadLock(path)
    else:
        lock = zk.WriteLock(path)
    await_go(directory)
    writer = os.path.join(directory, "W")
    readers = os.path.join(directory, "R")
    exclusive = role != "read"
    overlaps = 0
    log = os.open(os.path.join(directory, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tag = ("python-%s\n" % role).encode()
    for _ in range(count):
        if not lock.acquire(timeout=60):
            print("acquire timed out", file=sys.stderr)
            sys.exit(75)
        mine = None
        if exclusive:
            try:
                os.mkdir(writer)
            except FileExistsError:
                overlaps += 1
            if os.listdir(readers):
                overlaps += 1
        else:
            mine = os.path.join(readers, "python-%s" % uuid.uuid4().hex)
            open(mine, "w").close()
            if os.path.exists(writer):
                overlaps += 1
        os.write(log, tag)
        time.sleep(0.0002)
        try:
            if exclusive:
                os.rmdir(writer)
            else:
                os.remove(mine)
        except FileNotFoundError:
            pass  # after an overlap the marker may already be gone; the overlap was counted
        lock.release()
    zk.stop()
    zk.close()
    print("acquisitions %d overlaps %d" % (count, overlaps))
    sys.exit(0 if overlaps == 0 else 3)


def await_go(directory):
    open(os.path.join(directory, "ready-%d" % os.getpid()), "w").close()
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(directory, "go")):
        if time.time() > deadline:
            print("no go signal", file=sys.stderr)
            sys.exit(70)
        time.sleep(0.005)


def semaphore(zk, path, permits, count, directory):
    sem = zk.Semaphore(path, max_leases=permits)
    await_go(directory)
    holders = os.path.join(directory, "S")
    overlaps, most = 0, 0
    log = os.open(os.path.join(directory, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for _ in range(count):
        if not sem.acquire(timeout=60):
            print("acquire timed out", file=sys.stderr)
            return 75
        mine = os.path.join(holders, "python-%s" % uuid.uuid4().hex)
        open(mine, "w").close()
        inside = len(os.listdir(holders))
        if inside > permits:
            overlaps += 1
        most = max(most, inside)
        os.write(log, b"python-semaphore\n")
        time.sleep(0.005)
        os.remove(mine)
        sem.release()
    zk.stop()
    zk.close()
    print("acquisitions %d overlaps %d most %d" % (count, overlaps, most))
    return 0 if overlaps == 0 else 3


def election(zk, path, count, directory):
    contender = zk.Election(path, "python-%d" % os.getpid())
    await_go(directory)
    writer = os.path.join(directory, "W")
    log = os.open(os.path.join(directory, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    overlaps = [0]

    def lead():
        try:
            os.mkdir(writer)
        except FileExistsError:
            overlaps[0] += 1
        os.write(log, b"python-election\n")
        time.sleep(0.0002)
        try:
            os.rmdir(writer)
        except FileNotFoundError:
            pass

    for _ in range(count):
        contender.run(lead)
    zk.stop()
    zk.close()
    print("acquisitions %d overlaps %d" % (count, overlaps[0]))
    return 0 if overlaps[0] == 0 else 3


def election_hold(zk, path, directory):
    me = "python-%d" % os.getpid()
    contender = zk.Election(path, me)
    await_go(directory)

    leader = os.path.join(directory, "leader-" + me)

    def leave(state):
        # kazoo does not stop a leader whose connection is lost (a stall under load): stop as a careful
        # application would.
        if state != KazooState.CONNECTED and os.path.exists(leader):
            os.remove(leader)
            os.rmdir(os.path.join(directory, "W"))

    def lead():
        try:
            os.mkdir(os.path.join(directory, "W"))
        except FileExistsError:
            open(os.path.join(directory, "overlap-" + me), "w").close()
        with open(os.path.join(directory, "log"), "a") as log:
            log.write("python-election\n")
        open(leader, "w").close()
        zk.add_listener(leave)
        time.sleep(300)

    contender.run(lead)
    print("never killed", file=sys.stderr)
    return 75


if __name__ == "__main__":
    main()
