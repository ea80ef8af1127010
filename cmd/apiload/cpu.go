package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes is CPU time used so far by this process and by the PostgreSQL server processes whose
// command line mentions dataDir. On a machine shared with other work, CPU per create is the
// figure that does not depend on how busy the neighbours are.
func cpuTimes(dataDir string) (self, pg time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if dataDir == "" {
		return self, 0
	}
	tick := 100 // USER_HZ on Linux
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		comm, err := os.ReadFile(filepath.Join(p, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		// Backends are children of the postmaster; match the cluster by the postmaster's -D
		// argument or by being its child.
		stat, err := os.ReadFile(filepath.Join(p, "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(fields) < 13 || !ownedBy(p, fields[1], dataDir) {
			continue
		}
		ut, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		pg += time.Duration(ut+st) * time.Second / time.Duration(tick)
	}
	return self, pg
}

func ownedBy(proc, ppid, dataDir string) bool {
	for _, p := range []string{proc, "/proc/" + ppid} {
		cmd, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err == nil && strings.Contains(string(cmd), dataDir) {
			return true
		}
	}
	return false
}
