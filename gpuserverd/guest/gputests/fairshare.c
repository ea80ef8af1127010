// fairshare: how the GPU's time is split between sessions (processes) that share it.
//
//   fairshare kernels.ptx [seconds]
//
// Each session is a child process with its own context (natively) or its own gpuserverd session
// (through the guest library: FAIRSHARE_TOKENS holds one token per child, given to it as
// GPUCLOUD_TOKEN). A busy session launches a kernel of fixed length (`spin`, one block per SM,
// about 1 ms) in batches of 4 for the given time; an idle one holds its context and module and
// sleeps. Three phases, each started together through a pipe barrier:
//   solo   one busy session alone: its kernel rate R is the whole GPU;
//   four   four busy sessions: each one's share is its rate / R;
//   lone   one busy session among three idle ones: its share is its rate / R.
// Lines "FAIR phase session share ..." are printed, and a summary per phase.
#include "common.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SESSIONS 4
#define BATCH 4


static char *tokens[SESSIONS];

// session runs in a child: waits for the go byte, then is busy (or idle) for seconds, and writes
// the number of kernels it completed and the seconds they took to out.
static void session(int idx, int busy, const char *ptx, double seconds, int ready, int go, int out) {
	if (tokens[idx]) setenv("GPUCLOUD_TOKEN", tokens[idx], 1);
	open_device();
	CUmodule mod;
	CUfunction spin;
	CHECK(cuModuleLoadData(&mod, read_file(ptx, NULL)));
	CHECK(cuModuleGetFunction(&spin, mod, "spin"));
	CUdevice dev;
	int sms = 0, clock_khz = 0;
	CHECK(cuCtxGetDevice(&dev));
	CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	CHECK(cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
	long long cycles = (long long)clock_khz; // 1 ms at the rated clock
	void *args[] = {&cycles};
	CHECK(cuLaunchKernel(spin, sms, 1, 1, 32, 1, 1, 0, NULL, args, NULL)); // warm up
	CHECK(cuCtxSynchronize());
	char c = 'r';
	if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) exit(3);
	double t0 = now_s(), t = t0;
	long long kernels = 0;
	if (busy) {
		while (t - t0 < seconds) {
			for (int i = 0; i < BATCH; i++) CHECK(cuLaunchKernel(spin, sms, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
			CHECK(cuCtxSynchronize());
			kernels += BATCH;
			t = now_s();
		}
	} else {
		struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
		nanosleep(&ts, NULL);
		t = now_s();
	}
	double r[2] = {(double)kernels, t - t0};
	if (write(out, r, sizeof r) != sizeof r) exit(3);
	exit(0);
}

// phase runs n sessions (the first nbusy busy) together and returns each one's kernels/second.
static void phase(int n, int nbusy, const char *ptx, double seconds, double *rate) {
	int ready[2], go[2], out[2];
	if (pipe(ready) || pipe(go) || pipe(out)) exit(2);
	pid_t pids[SESSIONS];
	for (int i = 0; i < n; i++) {
		fflush(NULL);
		if ((pids[i] = fork()) == 0) {
			close(ready[0]);
			close(go[1]);
			close(out[0]);
			session(i, i < nbusy, ptx, seconds, ready[1], go[0], out[1]);
		}
	}
	close(ready[1]);
	close(go[0]);
	close(out[1]);
	char c;
	for (int i = 0; i < n; i++)
		if (read(ready[0], &c, 1) != 1) {
			fprintf(stderr, "fairshare: a session failed to start\n");
			exit(2);
		}
	char gos[SESSIONS] = {0};
	if (write(go[1], gos, n) != n) exit(2);
	// Results arrive in finishing order; match them by pid through waitpid order is not needed:
	// each child writes 16 bytes atomically, and busy ones report kernels > 0.
	double res[SESSIONS][2];
	for (int i = 0; i < n; i++)
		if (read(out[0], res[i], sizeof res[i]) != sizeof res[i]) {
			fprintf(stderr, "fairshare: a session failed\n");
			exit(2);
		}
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "fairshare: session %d exited with %d\n", i, st);
			exit(2);
		}
	}
	// Sort busy results first (idle ones report 0 kernels).
	for (int i = 0; i < n; i++) {
		for (int j = i + 1; j < n; j++)
			if (res[j][0] > res[i][0]) {
				double a = res[i][0], b = res[i][1];
				res[i][0] = res[j][0], res[i][1] = res[j][1];
				res[j][0] = a, res[j][1] = b;
			}
		rate[i] = res[i][1] > 0 ? res[i][0] / res[i][1] : 0;
	}
	close(ready[0]);
	close(go[1]);
	close(out[0]);
}

int main(int argc, char **argv) {
	const char *ptx = argc > 1 ? argv[1] : "kernels.ptx";
	double seconds = argc > 2 ? atof(argv[2]) : 3;
	char *tk = getenv("FAIRSHARE_TOKENS");
	if (tk) {
		tk = strdup(tk);
		char *save = NULL;
		for (int i = 0; i < SESSIONS; i++) tokens[i] = strtok_r(i ? NULL : tk, " ", &save);
	}
	double solo[SESSIONS] = {0}, four[SESSIONS] = {0}, lone[SESSIONS] = {0};
	phase(1, 1, ptx, seconds, solo);
	if (solo[0] <= 0) {
		fprintf(stderr, "fairshare: no kernels ran alone\n");
		return 2;
	}
	printf("FAIR solo 0 1.000 %.1f kernels/s\n", solo[0]);
	phase(SESSIONS, SESSIONS, ptx, seconds, four);
	// Each one's share of the GPU's time is its part of all the kernels the four ran (the GPU is
	// never idle with four busy sessions); its rate against R says how much a session still gets.
	double sum = 0, total = 0, lo = 1e9, hi = 0;
	for (int i = 0; i < SESSIONS; i++) total += four[i];
	for (int i = 0; i < SESSIONS; i++) {
		double s = four[i] / total;
		sum += four[i] / solo[0];
		lo = s < lo ? s : lo;
		hi = s > hi ? s : hi;
		printf("FAIR four %d share %.3f of-solo %.3f %.1f kernels/s\n", i, s, four[i] / solo[0], four[i]);
	}
	printf("FAIRSUM four share min %.3f max %.3f; rates sum to %.3f of solo\n", lo, hi, sum);
	phase(SESSIONS, 1, ptx, seconds, lone);
	printf("FAIR lone 0 %.3f %.1f kernels/s\n", lone[0] / solo[0], lone[0]);
	printf("FAIRSUM lone busy %.3f\n", lone[0] / solo[0]);
	return 0;
}
