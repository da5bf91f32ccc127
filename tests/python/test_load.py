"""Memory under load: bounded with a slow consumer, and flat over many epochs with a fast one
(docs/reliability.md; the long version is benchmarks/soak.py). The bounds are the design's
(prefetch + 2 pooled batch blocks) and a plateau, not speeds."""

import gc
import time

import loadscope as ls


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_a_slow_consumer_holds_at_most_prefetch_plus_two_blocks(demo):
    size, batch, prefetch = 64, 16, 3
    block = batch * 3 * size * size
    L = ls.Loader(ls.FileList(demo / "manifest.jsonl"), fields={"jpg": ls.Image(size)}, batch_size=batch,
                  threads=2, prefetch=prefetch)
    peak = 0
    for b in L:
        time.sleep(0.03)  # the training step is slower than decoding: the engine must wait, not pile up
        peak = max(peak, L.telemetry().to_dict()["memory"]["engine"]["pool_bytes"])
        del b
    assert block <= peak <= (prefetch + 2) * block, (peak, block)


def test_memory_is_flat_over_many_epochs(demo):
    L = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(96, flip=0.5), "cls": ls.Int()}, batch_size=8,
                  threads=2, shuffle=True, on_error="skip")
    samples = []
    for _epoch in range(40):
        for b in L:  # noqa: B007 (the last batch is dropped below)
            pass
        del b
        gc.collect()
        samples.append(rss_mib())
    warm, end = samples[4], samples[-1]
    # noise is under 1 MiB; one leaked batch block per epoch would add 7.7 MiB over these 35 epochs
    assert end - warm < 4, f"RSS grew from {warm:.1f} MiB (epoch 5) to {end:.1f} MiB (epoch 40): {samples}"
