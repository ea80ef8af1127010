#!/usr/bin/env python3
"""Runs every built CUDA sample (or those ONLY names) once per mode; prints one line per sample and mode and writes a TSV.
Modes come from argv: name=ENVSTRING ('native=' for none). Per-sample timeout: env T (default 40).
LOGDIR (env): each run's whole output is kept there as SAMPLE-MODE.log."""
import json, os, subprocess, sys, time, pathlib
build = pathlib.Path(sys.argv[1]); cfg = json.load(open(sys.argv[2])); out = sys.argv[3]
modes = [m.split('=', 1) for m in sys.argv[4:]]
only = set(os.environ.get('ONLY', '').split())
T = int(os.environ.get('T', '40'))
exes = []
for p in sorted(build.rglob('*')):
    if not p.is_file() or not os.access(p, os.X_OK) or 'CMakeFiles' in p.parts or p.suffix in ('.so', '.sh', '.py'):
        continue
    with open(p, 'rb') as f:
        if f.read(4) != b'\x7fELF':
            continue
    if only and p.name not in only:
        continue
    exes.append(p)
res = open(out, 'w')
for p in exes:
    c = cfg.get(p.name, {})
    if c.get('skip'):
        res.write(f"{p.name}\tall\tSKIP\tskipped by NVIDIA's test_args.json\n"); continue
    args = c.get('args', [])
    if 'runs' in c and c['runs']:
        args = c['runs'][0].get('args', [])
    for name, envs in modes:
        env = dict(os.environ)
        for kv in envs.split():
            k, v = kv.split('=', 1); env[k] = v
        t0 = time.time()
        try:
            r = subprocess.run([f'./{p.name}'] + args, cwd=p.parent, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=T, stdin=subprocess.DEVNULL)
            rc, outp = r.returncode, r.stdout.decode(errors='replace')
        except subprocess.TimeoutExpired as e:
            rc, outp = 'timeout', (e.stdout or b'').decode(errors='replace')
        dt = time.time() - t0
        if os.environ.get('LOGDIR'):
            pathlib.Path(os.environ['LOGDIR'], f'{p.name}-{name}.log').write_text(outp)
        lines = [l.strip() for l in outp.strip().splitlines() if l.strip()]
        # the most telling line: an error/waived line if any, else the last
        tell = next((l for l in lines if any(w in l for w in ('error', 'Error', 'FAIL', 'WAIVED', 'gpucloud:', 'not supported', 'No CUDA', 'requires'))), lines[-1] if lines else '')
        status = 'PASS' if rc == 0 and 'WAIVED' not in outp else ('WAIVED' if 'WAIVED' in outp else f'FAIL({rc})')
        res.write(f"{p.name}\t{name}\t{status}\t{dt:.1f}s\t{tell[:200]}\n"); res.flush()
        print(f"{p.name:40s} {name:7s} {status:10s} {dt:5.1f}s {tell[:120]}", flush=True)
