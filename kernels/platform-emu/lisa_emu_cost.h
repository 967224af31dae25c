/* SPDX-License-Identifier: GPL-2.0 */
/*
 * lisa-ext platform emulation: paying an emulated cost with the vCPU halted.
 *
 * Shared by lisa_emu_cpuidle (an idle state's exit latency) and
 * lisa_emu_cpufreq (the speed of an OPP). Each module includes its own copy:
 * neither depends on the other.
 *
 * Why halted: the virtual board is QEMU single-threaded TCG, every vCPU on one
 * host thread, scheduled round robin. A vCPU that spins to "take time" takes
 * it from every other vCPU; a halted vCPU gives the host thread to the others
 * and its guest clock still advances with the host's. So a cost of T ns is
 * paid by halting until a timer T ns ahead fires, with interrupts taken as
 * they come (an interrupt ends one halt; the loop halts again until the
 * deadline, or until the caller's stop condition holds).
 *
 * What is arch-specific is one primitive, emu_arch_wait_for_irq(): with
 * interrupts disabled, wait for one, let its handler run, return with
 * interrupts disabled again. x86: "sti; hlt" (the interrupt is taken at once,
 * then cli). arm64: WFI wakes on a pending interrupt even while it is masked;
 * unmask to take it, mask again. Everything else (hrtimers, the deadline loop,
 * the accounting in each module) is generic kernel code.
 *
 * The deadline timer (struct emu_waker) is a per-CPU hrtimer in hard-interrupt
 * mode, pinned: it only ends a halt, and learns how late it fires (below).
 * Arm it on the CPU that halts.
 *
 * The "timing" module parameter (both modules, writable at run time):
 *   faithful   pay the cost
 *   decisions  pay nothing (what the modules load with): the tables only steer
 *              the governors, every idle state is a plain halt and every OPP
 *              runs at the vCPU's speed
 * A campaign writes it before each run, from its spec's board-timing
 * (lisa_ext.vboard.timing).
 */
#ifndef LISA_EMU_COST_H
#define LISA_EMU_COST_H

#include <linux/hrtimer.h>
#include <linux/irqflags.h>
#include <linux/ktime.h>
#include <linux/moduleparam.h>
#include <linux/string.h>

#if defined(CONFIG_X86)
static __always_inline void emu_arch_wait_for_irq(void)
{
	raw_safe_halt();	/* sti; hlt: returns after the handler ran */
	raw_local_irq_disable();
}
#elif defined(CONFIG_ARM64)
#include <asm/barrier.h>
static __always_inline void emu_arch_wait_for_irq(void)
{
	dsb(sy);
	wfi();			/* wakes on a pending interrupt, masked or not */
	raw_local_irq_enable();	/* take it */
	raw_local_irq_disable();
}
#else
#error "lisa-ext emulation: emu_arch_wait_for_irq() has no implementation for this architecture"
#endif

/* ---- the timing switch ---- */

/*
 * Off when loaded, so that a boot measures the kernel's own behaviour until
 * something asks for the costs (a campaign does, before each run).
 */
static bool emu_faithful;
/* Called after each write of the parameter, once the module set it up (may be NULL). */
static void (*emu_timing_changed)(void);

static int emu_timing_set(const char *val, const struct kernel_param *kp)
{
	if (sysfs_streq(val, "faithful"))
		WRITE_ONCE(emu_faithful, true);
	else if (sysfs_streq(val, "decisions"))
		WRITE_ONCE(emu_faithful, false);
	else
		return -EINVAL;
	if (READ_ONCE(emu_timing_changed))
		emu_timing_changed();
	return 0;
}

static int emu_timing_get(char *buffer, const struct kernel_param *kp)
{
	return sysfs_emit(buffer, "%s\n", READ_ONCE(emu_faithful) ? "faithful" : "decisions");
}

static const struct kernel_param_ops emu_timing_ops = {
	.set = emu_timing_set,
	.get = emu_timing_get,
};

#define EMU_TIMING_PARAM(what)							\
	module_param_cb(timing, &emu_timing_ops, NULL, 0644);			\
	MODULE_PARM_DESC(timing, "faithful: pay " what " with the vCPU halted; "	\
			 "decisions: pay nothing (default)")

/*
 * ---- halting until a deadline ----
 *
 * A TCG vCPU's timer interrupt arrives late, by tens of microseconds on a
 * quiet host and by up to milliseconds on a loaded one (the host thread runs
 * the other vCPUs, the host runs other processes). Paid as is, every cost
 * would grow by that lateness. So each CPU's waker keeps an estimate of the
 * median lateness of its timer (a streaming median: up by 1/16 when a sample
 * is above it, down by 1/16 when below; a mean would follow the rare
 * many-millisecond delays of a loaded host and end most halts far too early)
 * and programs the timer that much early. The callers count what was really
 * paid and carry the difference to the next payment.
 */
struct emu_waker {
	struct hrtimer timer;
	u64 late_ns;		/* median lateness of this CPU's timer, estimated */
	bool fired;
};

static enum hrtimer_restart emu_waker_fn(struct hrtimer *timer)
{
	struct emu_waker *w = container_of(timer, struct emu_waker, timer);
	s64 late = ktime_to_ns(ktime_sub(ktime_get(), hrtimer_get_expires(timer)));
	u64 step = (w->late_ns >> 4) + NSEC_PER_USEC;

	if (late > (s64)w->late_ns)
		w->late_ns = min_t(u64, w->late_ns + step, NSEC_PER_MSEC);
	else
		w->late_ns -= min(step, w->late_ns);
	WRITE_ONCE(w->fired, true);
	return HRTIMER_NORESTART;
}

static inline void emu_waker_init(struct emu_waker *w)
{
	hrtimer_init(&w->timer, CLOCK_MONOTONIC, HRTIMER_MODE_ABS_PINNED_HARD);
	w->timer.function = emu_waker_fn;
	w->late_ns = 0;
	w->fired = false;
}

/* On the CPU that halts: wake it at @end_ns, early by the lateness expected. */
static inline void emu_waker_arm(struct emu_waker *w, u64 now, u64 end_ns)
{
	u64 at = end_ns - min(w->late_ns, end_ns - now);

	WRITE_ONCE(w->fired, false);
	hrtimer_start(&w->timer, ns_to_ktime(at), HRTIMER_MODE_ABS_PINNED_HARD);
}

/* Whether the halt towards @end_ns is over: its timer fired, or the deadline passed anyway. */
static inline bool emu_waker_done(struct emu_waker *w, u64 now, u64 end_ns)
{
	return READ_ONCE(w->fired) || now >= end_ns;
}

/*
 * Task context (softirq included), interrupts enabled: halt until the waker
 * says @end_ns is reached or need_resched() is set (*@preempted then says so).
 * Returns the time halted.
 */
static inline u64 emu_halt_until(struct emu_waker *w, u64 end_ns, bool *preempted)
{
	u64 start = ktime_get_ns(), now = start;

	*preempted = false;
	emu_waker_arm(w, start, end_ns);
	for (;;) {
		raw_local_irq_disable();
		now = ktime_get_ns();
		if (emu_waker_done(w, now, end_ns))
			break;
		if (need_resched()) {
			*preempted = true;
			break;
		}
		emu_arch_wait_for_irq();
		raw_local_irq_enable();
	}
	raw_local_irq_enable();
	hrtimer_try_to_cancel(&w->timer);
	return now - start;
}

#endif /* LISA_EMU_COST_H */
