package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The machine is shared, so wall-clock rates depend on what else runs. CPU time spent by this
// process and by the PostgreSQL server tells what ingestion costs regardless: records per
// CPU-second, and the rate two idle cores would give.

const clockTick = 100 // USER_HZ on Linux

// selfCPU is this process's user+system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time of the PostgreSQL server whose data folder is dataDir: the
// postmaster, its live children and its reaped children. 0 when it cannot be read.
func serverCPU(dataDir string) time.Duration {
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
