# bench/measure.sh — the figures the benchmark scripts read (CPU
# from /proc, quotad's /metrics), sourced by ab.sh and
# interleave.sh.

# cpu PID: the process's user+system ticks (1/100 s), 0 without a PID
cpu() { if [[ -n $1 ]]; then awk '{print $14+$15}' "/proc/$1/stat"; else echo 0; fi; }
# busy, total and steal ticks of the whole machine (every core), from /proc/stat
machine() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
# per T N: T ticks per check over N checks, in microseconds, one decimal
per() { awk -v t="$1" -v n="$2" 'BEGIN { printf "%.1f", (n > 0 ? t * 10000 / n : 0) }'; }
# pct A B: A as a percentage of B, one decimal
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b > 0 ? a * 100 / b : 0) }'; }
# metric NAME [DIVISOR]: the unlabelled sample NAME of the /metrics text on
# stdin, divided and rounded ("" when absent)
metric() { awk -v m="$1" -v d="${2:-1}" '$1 == m {printf "%.0f", $2 / d}'; }
