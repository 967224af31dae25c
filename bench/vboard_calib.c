/*
 * The guest side of bench/vboard_calibration.py (built static on the host, pushed to the board).
 *
 *   vboard_calib spin SECONDS
 *       a CPU-bound loop for SECONDS of wall time; prints "iterations N seconds S"
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

static int spin(double seconds)
{
	uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), n = 0, t;

	do {
		work(4096);
		n += 4096;
		t = now_ns();
	} while (t < end);
	printf("iterations %llu seconds %.6f\n", (unsigned long long)n, (t - start) / 1e9);
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
	if (argc == 5 && !strcmp(argv[1], "periodic"))
		return periodic(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), atoi(argv[4]));
	fprintf(stderr, "usage: %s spin SECONDS | periodic PERIOD_US WORK_ITERATIONS COUNT\n", argv[0]);
	return 2;
}
