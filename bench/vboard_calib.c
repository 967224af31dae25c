/*
 * The guest side of bench/vboard_calibration.py (built static on the host, pushed to the board).
 *
 *   vboard_calib spin SECONDS
 *       a CPU-bound loop for SECONDS of wall time; prints "iterations N seconds S"
 *   vboard_calib pairs SETSPEED_FILE TOP_KHZ KHZ SECONDS COUNT
 *       COUNT times: SECONDS of the loop at TOP_KHZ, then SECONDS at KHZ (each written to
 *       SETSPEED_FILE, a userspace governor's scaling_setspeed, first); prints
 *       "pair <iterations/s at TOP_KHZ> <iterations/s at KHZ>" per pair: the two halves of a
 *       pair are a fraction of a second apart, so a host whose speed drifts affects both
 *   vboard_calib periodic PERIOD_US WORK_ITERATIONS COUNT
 *       wakes at absolute deadlines PERIOD_US apart (clock_nanosleep), does WORK_ITERATIONS
 *       of the same loop, COUNT times; prints its pid first ("pid N"), then one line
 *       "lateness_us L" per wake-up: how late it ran after its deadline
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* A few integer operations per iteration that the compiler cannot drop. */
static void work(uint64_t iterations)
{
	uint64_t x = sink;

	for (uint64_t i = 0; i < iterations; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

/* Iterations per second of the loop over @seconds of wall time. */
static double rate(double seconds)
{
	uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), n = 0, t;

	do {
		work(4096);
		n += 4096;
		t = now_ns();
	} while (t < end);
	return n / ((t - start) / 1e9);
}

static int spin(double seconds)
{
	printf("iterations %.0f seconds %.6f\n", rate(seconds) * seconds, seconds);
	return 0;
}

static int set_khz(const char *path, const char *khz)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(khz, f) < 0 || fclose(f)) {
		perror(path);
		return -1;
	}
	return 0;
}

static int pairs(const char *path, const char *top, const char *khz, double seconds, int count)
{
	for (int i = 0; i < count; i++) {
		double a, b;

		if (set_khz(path, top))
			return 1;
		a = rate(seconds);
		if (set_khz(path, khz))
			return 1;
		b = rate(seconds);
		printf("pair %.0f %.0f\n", a, b);
	}
	return 0;
}

static int periodic(uint64_t period_us, uint64_t iterations, int count)
{
	struct timespec next;
	uint64_t deadline;

	printf("pid %d\n", getpid());
	fflush(stdout);
	deadline = now_ns() + period_us * 1000;
	for (int i = 0; i < count; i++) {
		next.tv_sec = deadline / 1000000000ull;
		next.tv_nsec = deadline % 1000000000ull;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL))
			;
		printf("lateness_us %.1f\n", (now_ns() - deadline) / 1e3);
		work(iterations);
		deadline += period_us * 1000;
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "spin"))
		return spin(atof(argv[2]));
	if (argc == 7 && !strcmp(argv[1], "pairs"))
		return pairs(argv[2], argv[3], argv[4], atof(argv[5]), atoi(argv[6]));
	if (argc == 5 && !strcmp(argv[1], "periodic"))
		return periodic(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), atoi(argv[4]));
	fprintf(stderr, "usage: %s spin SECONDS | pairs SETSPEED_FILE TOP_KHZ KHZ SECONDS COUNT | "
		"periodic PERIOD_US WORK_ITERATIONS COUNT\n", argv[0]);
	return 2;
}
