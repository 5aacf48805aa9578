#!/usr/bin/env python3
"""Cut the optimizer out of a training step's Graph IR, for timing it alone.

    tgc compile models/transformer.tg --preset small --train --emit=ir -o /tmp/step.ir
    python3 bench/extract_optimizer.py /tmp/step.ir /tmp/optimizer.tir
    TGC_NUM_THREADS=1 perf stat -e task-clock tgc run /tmp/optimizer.tir --backend cpu \
        --random-inputs 1 --repeat 105

The optimizer is every node passes/train_step.cpp builds (values named optim.*, new.*,
grad_norm, lr); each value it reads from the rest of the step (a gradient, a parameter, a
moment, the step counter) becomes an input of that value's type, so the cut graph runs the
same kernels on random data: the gradient-norm reductions, the clipping factor, the
bias corrections and one AdamW update per parameter.
"""
import re
import sys

DEF = re.compile(r'^\s*%([\w.]+)(?:, %[\w.]+)* = (\w+)\(.*: (\S+(?:, \S+)*)$')


def main(src, dst):
    lines = open(src).read().splitlines()
    defs, order = {}, []
    for line in lines:
        m = DEF.match(line)
        if not m:
            continue
        names = re.findall(r'%([\w.]+)', line.split(' = ', 1)[0])
        types = [t.strip() for t in m.group(3).split(', ')]
        for name, typ in zip(names, types):
            defs[name] = (line, typ, len(names) == 1)
            order.append(name)
    optim = [n for n in order
             if n.startswith(('optim.', 'new.')) or n in ('grad_norm', 'lr')]
    inside = set(optim)
    reads = []
    for n in optim:
        for v in re.findall(r'%([\w.]+)', defs[n][0].split(' = ', 1)[1]):
            if v not in inside and v not in reads:
                reads.append(v)
    out = ['graph @optimizer {']
    for v in reads:
        line, typ, _ = defs[v]
        out.append(line if ' = input(' in line else f'  %{v} = input() : {typ}')
    out += [defs[n][0] for n in optim]
    results = [n for n in optim if n.startswith('new.')] + ['grad_norm', 'lr']
    out.append('  return ' + ', '.join('%' + r for r in results))
    out.append('}')
    open(dst, 'w').write('\n'.join(out) + '\n')
    print(f'{dst}: {len(reads)} inputs, {len(optim)} nodes, {len(results)} results')


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit('usage: extract_optimizer.py STEP.ir OUT.tir')
    main(sys.argv[1], sys.argv[2])
