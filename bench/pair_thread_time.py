# Whether the GEMMs the executable runs as pairs (one per thread) lose time to the other
# core: sums their own-thread times from a 2-thread `tgc run --profile` listing and the same
# launches' times from a 1-thread listing of the same graph.
#   TGC_NUM_THREADS=2 tgc run s.tir --backend cpu --random-inputs 1 --int-range 1,8000 \
#       --repeat 6 --profile --profile-top 5000 2> two.txt >/dev/null
#   TGC_NUM_THREADS=1 tgc run ... 2> one.txt >/dev/null
#   python3 bench/pair_thread_time.py two.txt one.txt
import re
import sys


def load(path):
    launches = {}
    for line in open(path):
        m = re.match(r"\s+[\d.]+%\s+([\d.]+) ms\s+(\S+)(\s+\(pair\))?", line)
        if m:
            launches[m.group(2)] = (float(m.group(1)), bool(m.group(3)))
    return launches


two, one = load(sys.argv[1]), load(sys.argv[2])
pairs = [name for name, (_, paired) in two.items() if paired]
t2 = sum(two[n][0] for n in pairs)
t1 = sum(one[n][0] for n in pairs)
print(f"{len(pairs)} paired launches, own-thread ms per step: 2 threads {t2:.1f}, "
      f"the same launches on 1 thread {t1:.1f}, ratio {t2 / t1:.3f}")
