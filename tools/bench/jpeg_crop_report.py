#!/usr/bin/python3
"""What the lossless JPEG crop saves, from a Sophon profile (sample_profile.csv).

Usage: tools/bench/jpeg_crop_report.py PROFILE.csv

Prints, over the profile's samples: the mean bytes of each stage; the mean
per-sample minimum over the stages with and without JPEG_CROP (what smartoff
sends per sample on a network-bound link) and their ratio; and the mean CPU
times of the ops (thread CPU seconds of one core, as the profiler measured
them): the lossless crop beside decode+crop+resize from the file, and the
decode of a JPEG_CROP region beside the decode of the whole file. Make the
profile with the local profiler, e.g.
  build/sophon-calibrate-times --data=DIR --epochs=1 --profile_out=OUT
"""
import csv
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = []
    with open(sys.argv[1]) as f:
        lines = [l for l in f if not l.startswith('#')]
    for r in csv.DictReader(lines):
        rows.append(r)
    if not rows:
        sys.exit('no samples in ' + sys.argv[1])
    n = len(rows)
    stages = [c[:-len('_bytes')] for c in rows[0] if c.endswith('_bytes')]
    mean = lambda key: sum(float(r[key]) for r in rows) / n
    print(f'{n} samples of {sys.argv[1]}')
    for s in stages:
        print(f'  mean {s:>10} bytes: {mean(s + "_bytes") / 1e3:8.1f} KB')
    whole = sum(1 for r in rows if int(r['jpeg_crop_bytes']) >= int(r['raw_bytes']))
    print(f'  files not cropped losslessly (sent whole): {whole}')
    without = [s for s in stages if s != 'jpeg_crop']
    min_without = sum(min(int(r[s + '_bytes']) for s in without) for r in rows) / n
    min_with = sum(min(int(r[s + '_bytes']) for s in stages) for r in rows) / n
    print(f'  mean per-sample minimum over {",".join(without)}: {min_without / 1e3:.1f} KB')
    print(f'  mean per-sample minimum with jpeg_crop: {min_with / 1e3:.1f} KB '
          f'({min_without / min_with:.2f}x less)')
    ms = lambda op: 1e3 * mean(op + '_s')
    print(f'  storage CPU per sample, one core: jpeg_crop {ms("jpeg_crop"):.2f} ms, '
          f'decode_crop (decode + crop + resize) {ms("decode_crop"):.2f} ms '
          f'(ratio {ms("decode_crop") / ms("jpeg_crop"):.2f})')
    print(f'  training node decode: from a jpeg_crop region {ms("decode_jpeg_crop"):.2f} ms, '
          f'from the file {ms("decode_crop"):.2f} ms '
          f'(ratio {ms("decode_crop") / ms("decode_jpeg_crop"):.2f})')


if __name__ == '__main__':
    main()
