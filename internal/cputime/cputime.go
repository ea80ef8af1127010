// Package cputime reads the CPU time a benchmark spends in its own process and in the PostgreSQL
// server it drives. On a machine shared with other work, CPU per operation is the figure that
// does not depend on how busy the neighbours are; the benchmarks print it beside wall-clock rates.
package cputime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const clockTick = 100 // USER_HZ on Linux

// Self is this process's user+system time.
func Self() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PostgresServer is the CPU time of the PostgreSQL server whose data folder is dataDir: the
// postmaster, its reaped children (backends that have exited) and its live children. It is 0
// when dataDir is empty or the server cannot be read (stopped, not Linux).
func PostgresServer(dataDir string) time.Duration {
	if dataDir == "" {
		return 0
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm := strings.SplitN(string(raw), "\n", 2)[0]
	total := int64(0)
	if f := statFields(pm); f != nil {
		total += sum(f, 11, 12, 13, 14) // utime stime cutime cstime
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if f := statFields(e.Name()); f != nil && f[1] == pm {
			total += sum(f, 11, 12)
		}
	}
	return time.Duration(total) * time.Second / clockTick
}

// statFields returns /proc/pid/stat fields after the command name: [0]=state, [1]=ppid, ...
func statFields(pid string) []string {
	if _, err := strconv.Atoi(pid); err != nil {
		return nil
	}
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func sum(f []string, idx ...int) int64 {
	var t int64
	for _, i := range idx {
		if i < len(f) {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			t += v
		}
	}
	return t
}
