/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The trace event of lisa_sched_tp.c: the scheduler's overutilized state.
 * (Included twice by the tracing machinery, hence the unusual guard.)
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM lisa_ext

#if !defined(_LISA_SCHED_TP_H) || defined(TRACE_HEADER_MULTI_READ)
#define _LISA_SCHED_TP_H

#include <linux/tracepoint.h>

TRACE_EVENT(sched_overutilized,

	TP_PROTO(bool overutilized),

	TP_ARGS(overutilized),

	TP_STRUCT__entry(
		__field(int, overutilized)
	),

	TP_fast_assign(
		__entry->overutilized = overutilized;
	),

	TP_printk("overutilized=%d", __entry->overutilized)
);

#endif /* _LISA_SCHED_TP_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE lisa_sched_tp
#include <trace/define_trace.h>
