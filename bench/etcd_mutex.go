// The Go side of bench/run's etcd figures: etcd's own lock, concurrency.Mutex from etcd 3.4's Go sources (Debian's
// golang-etcd-server-dev), with the same subcommands and output as `recipes-bench etcd`.
//
//	etcd_mutex uncontended ENDPOINTS ITERS      one session: Lock + Unlock, ITERS times (a fifth more to warm up)
//	etcd_mutex contended ENDPOINTS CLIENTS SECS  CLIENTS sessions (a client each) looping Lock + Unlock on one name
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "etcd_mutex: "+format+"\n", args...)
	os.Exit(1)
}

func session(endpoints []string) (*clientv3.Client, *concurrency.Session) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fail("connect: %v", err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fail("session: %v", err)
	}
	return cli, s
}

func name(what string) string {
	return fmt.Sprintf("/bench/go-etcd-%s-%d-%d", what, os.Getpid(), time.Now().UnixNano())
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail("%s: %v", s, err)
	}
	return n
}

func main() {
	if len(os.Args) < 4 {
		fail("usage: etcd_mutex uncontended ENDPOINTS ITERS | contended ENDPOINTS CLIENTS SECS")
	}
	endpoints := strings.Split(strings.ReplaceAll(os.Args[2], "http://", ""), ",")
	ctx := context.Background()
	switch os.Args[1] {
	case "uncontended":
		iters := atoi(os.Args[3])
		cli, s := session(endpoints)
		m := concurrency.NewMutex(s, name("uncontended"))
		us := make([]float64, 0, iters)
		for i := 0; i < iters+iters/5; i++ {
			t0 := time.Now()
			if err := m.Lock(ctx); err != nil {
				fail("lock: %v", err)
			}
			if err := m.Unlock(ctx); err != nil {
				fail("unlock: %v", err)
			}
			if i >= iters/5 {
				us = append(us, float64(time.Since(t0).Nanoseconds())/1e3)
			}
		}
		sort.Float64s(us)
		fmt.Printf("median_us=%.1f p99_us=%.1f\n", us[len(us)/2], us[len(us)*99/100])
		s.Close()
		cli.Close()
	case "contended":
		clients, secs := atoi(os.Args[3]), os.Args[4]
		seconds, err := strconv.ParseFloat(secs, 64)
		if err != nil {
			fail("%s: %v", secs, err)
		}
		pfx := name(fmt.Sprintf("contended-%d", clients))
		var holds int64
		var stop int32
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < clients; i++ {
			cli, s := session(endpoints)
			m := concurrency.NewMutex(s, pfx)
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				for atomic.LoadInt32(&stop) == 0 {
					if err := m.Lock(ctx); err != nil {
						fail("lock: %v", err)
					}
					if err := m.Unlock(ctx); err != nil {
						fail("unlock: %v", err)
					}
					atomic.AddInt64(&holds, 1)
				}
				s.Close()
				cli.Close()
			}()
		}
		ready.Wait()
		t0 := time.Now()
		close(start)
		time.Sleep(time.Duration(seconds * float64(time.Second)))
		n := atomic.LoadInt64(&holds)
		elapsed := time.Since(t0).Seconds()
		atomic.StoreInt32(&stop, 1)
		done.Wait()
		fmt.Printf("handoffs_per_s=%.1f holds=%d\n", float64(n)/elapsed, n)
	default:
		fail("unknown figure %s", os.Args[1])
	}
}
