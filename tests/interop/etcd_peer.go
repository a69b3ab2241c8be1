// The Go peer of the etcd interoperability tests: etcd's own lock, concurrency.Mutex from etcd 3.4's Go sources
// (Debian's golang-etcd-server-dev), taken and released in a loop beside Rust contenders on the same prefix.
//
// Usage: etcd_peer ENDPOINTS PREFIX COUNT HOLD_MS DIR TAG
//
// Each hold runs the overlap detector shared with the Rust side (tests/tests/suite/interop.rs): an exclusive holder
// makes the directory DIR/W (it must not exist) and finds DIR/R empty, appends TAG to DIR/log, waits HOLD_MS, and
// removes DIR/W. Prints "holds=N overlaps=M" at the end; exits 1 on an error.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "etcd_peer: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 7 {
		fail("usage: etcd_peer ENDPOINTS PREFIX COUNT HOLD_MS DIR TAG")
	}
	endpoints := strings.Split(os.Args[1], ",")
	prefix := os.Args[2]
	count, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fail("COUNT: %v", err)
	}
	holdMs, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fail("HOLD_MS: %v", err)
	}
	dir, tag := os.Args[5], os.Args[6]

	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fail("connect: %v", err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		fail("session: %v", err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, prefix)
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fail("log: %v", err)
	}
	defer log.Close()

	overlaps := 0
	for i := 0; i < count; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := m.Lock(ctx); err != nil {
			cancel()
			fail("lock %d: %v", i, err)
		}
		if err := os.Mkdir(filepath.Join(dir, "W"), 0o755); err != nil {
			overlaps++
		}
		if entries, _ := os.ReadDir(filepath.Join(dir, "R")); len(entries) > 0 {
			overlaps++
		}
		if _, err := log.WriteString(tag + "\n"); err != nil {
			fail("log: %v", err)
		}
		time.Sleep(time.Duration(holdMs) * time.Millisecond)
		os.Remove(filepath.Join(dir, "W"))
		if err := m.Unlock(ctx); err != nil {
			cancel()
			fail("unlock %d: %v", i, err)
		}
		cancel()
	}
	fmt.Printf("holds=%d overlaps=%d\n", count, overlaps)
}
