"""The GPU side: pinned batches, the side-stream copy overlapping compute, and JPEG decoding on
the GPU against the CPU path and torchvision. Run on a GPU machine by scripts/gpu-check.sh;
skipped with a reason elsewhere."""

import ctypes
import gc
import io

import pytest
import torch

import loadscope as ls
from loadscope import _transfer
from loadscope.gpu import JpegDecoder, crop_params

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")]


@pytest.fixture(autouse=True)
def _garbage_freed_by_its_test():
    """Loaders left mid-epoch and their page-locked blocks are freed at the end of the test that
    made them, so a fault in a destructor is charged to that test, not to a later one."""
    yield
    gc.collect()
    torch.cuda.synchronize()


def images(demo, **kw):
    return ls.Loader(ls.FileList(demo / "manifest.jsonl"), fields={"jpg": ls.Image(96, **kw), "cls": ls.Int()},
                     batch_size=16, threads=2)


def jpeg_bytes(demo, **kw):
    return ls.Loader(ls.FileList(demo / "manifest.jsonl"), fields={"jpg": ls.Bytes(), "cls": ls.Int()},
                     batch_size=16, threads=2, **kw)


class _PointerAttributes(ctypes.Structure):  # cudaPointerAttributes (CUDA >= 10)
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int), ("devicePointer", ctypes.c_void_p),
                ("hostPointer", ctypes.c_void_p)]


def memory_type(ptr: int) -> int:
    """cudaPointerGetAttributes' type: 0 pageable host memory, 1 page-locked host memory."""
    _, _, path = _transfer.cudart_pin_functions()
    attr = _PointerAttributes()
    rc = ctypes.CDLL(path).cudaPointerGetAttributes(ctypes.byref(attr), ctypes.c_void_p(ptr))
    assert rc == 0, f"cudaPointerGetAttributes returned {rc}"
    return attr.type


def test_batches_are_built_in_page_locked_memory(demo, monkeypatch):
    seen = []
    original = _transfer.CudaTransfer.__call__

    def spy(self, batch):
        seen.append(memory_type(batch["jpg"].data_ptr()))
        return original(self, batch)

    monkeypatch.setattr(_transfer.CudaTransfer, "__call__", spy)
    L = ls.Loader(ls.FileList(demo / "manifest.jsonl"), fields={"jpg": ls.Image(96)}, batch_size=16, device="cuda")
    for _ in L:
        pass
    assert seen and all(t == 1 for t in seen), seen
    assert memory_type(torch.empty(1 << 20, dtype=torch.uint8).data_ptr()) == 0  # the probe tells them apart


def test_copy_runs_on_a_side_stream_under_compute(demo, monkeypatch):
    """With a long kernel queued on the compute stream, the next batch's copy starts and ends
    before that kernel does: the copy is hidden, and the telemetry says so."""
    collect = _transfer.CudaTransfer._collect  # keep every copy's events until the end
    monkeypatch.setattr(_transfer.CudaTransfer, "_collect", lambda self, wait=False: collect(self, True) if wait else None)
    L = ls.Loader(ls.FileList(demo / "manifest.jsonl"), fields={"jpg": ls.Image(224)}, batch_size=32,
                  threads=2, prefetch=4, device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    it = iter(L)
    next(it)
    hidden = 0
    steps = 0
    for _ in range(3):
        done = torch.cuda.Event(enable_timing=True)
        for _ in range(40):  # ~100 ms of fp32 matmuls on an H200
            a = torch.mm(a, a).clamp_(-1, 1)
        done.record()
        b = next(it)
        start, end = L._transfer._pending[-1][0], L._transfer._pending[-1][1]
        torch.cuda.synchronize()
        steps += 1
        hidden += start.elapsed_time(done) > 0 and end.elapsed_time(done) > 0  # copy ended before compute
        assert b["jpg"].is_cuda
    assert hidden == steps
    L._transfer.drain()
    t = L.telemetry().to_dict()["transfer"]
    assert t["overlapped_share"] > 0 and t["bandwidth_gbps"] > 1.0


def test_gpu_decode_matches_the_cpu_path_within_tolerance(demo):
    """crop='center' is deterministic: nvJPEG + torch's antialiased resize against libjpeg-turbo
    + loadscope's Pillow-tap resampler, image for image."""
    cpu = torch.cat([b["jpg"] for b in images(demo, crop="center")]).float()
    dec = JpegDecoder(96, crop="center", device="cuda")
    L = jpeg_bytes(demo)
    gpu = torch.cat([dec(b["jpg"], b["__index__"], 0, b["__key__"]).cpu() for b in L]).float()
    assert gpu.shape == cpu.shape and gpu.dtype == torch.float32
    per_image = (gpu - cpu).abs().flatten(1).mean(1)
    print(f"GPU vs CPU decode, center crop 96: mean |diff| {per_image.mean():.3f}, worst image "
          f"{per_image.max():.3f}, max |diff| {(gpu - cpu).abs().max():.0f} over {len(per_image)} images")
    assert per_image.max() < 3.0 and per_image.mean() < 1.5


def test_gpu_random_crops_are_torchvisions_seeded_crops(demo):
    """random_resized on the GPU takes the crops that a seeded torchvision pipeline takes
    (PIL decode + TF.resized_crop + hflip with loadscope.gpu.crop_params)."""
    import torchvision.transforms.functional as TF
    from PIL import Image

    import json
    rows = [json.loads(line) for line in (demo / "manifest.jsonl").read_text().splitlines()][:32]
    dec = JpegDecoder(64, crop="random_resized", flip=0.5, seed=7, device="cuda")
    blobs = [(demo / r["path"]).read_bytes() for r in rows]
    got = dec(blobs, list(range(32)), 3).cpu().float()
    flips = 0
    for i, blob in enumerate(blobs):
        im = Image.open(io.BytesIO(blob)).convert("RGB")
        top, left, h, w, flip = crop_params("random_resized", 7, 0.5, im.height, im.width, 3, i)
        flips += flip
        ref = TF.resized_crop(im, top, left, h, w, [64, 64])
        ref = TF.pil_to_tensor(TF.hflip(ref) if flip else ref).float()
        assert (got[i] - ref).abs().mean() < 4.0, (i, (got[i] - ref).abs().mean())
    assert 0 < flips < 32


def test_gpu_decode_of_a_bad_jpeg_names_the_sample(demo):
    good = next(iter((demo / "folder").rglob("*.jpg"))).read_bytes()
    dec = JpegDecoder(32, crop="resize", device="cuda")
    with pytest.raises(ls.DecodeError, match="broken-7"):
        dec([good, b"\xff\xd8\xff\xe0 not a jpeg at all"], [0, 1], 0, keys=["fine-0", "broken-7"])
    grey = io.BytesIO()
    from PIL import Image
    Image.new("L", (50, 40), 128).save(grey, format="JPEG")
    out = dec([good, grey.getvalue()], [0, 1], 0)
    assert out.shape == (2, 3, 32, 32) and int((out[1].float() - 128).abs().max()) <= 2
    assert dec.stats()["images"] == 2



@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_images_under_cuda_are_copied_as_uint8_and_normalised_on_the_gpu(demo, dtype):
    """The same values as the CPU table (within float32 rounding of torch's ops), as CUDA
    tensors of the dtype; the copy moved uint8 (a quarter of float32's bytes)."""
    kw = dict(dtype=dtype, mean=ls.IMAGENET_MEAN, std=ls.IMAGENET_STD)
    cpu = next(iter(images(demo, **kw)))["jpg"]
    L = ls.Loader(ls.FileList(demo / "manifest.jsonl"), fields={"jpg": ls.Image(96, **kw), "cls": ls.Int()},
                  batch_size=16, threads=2, device="cuda")
    gpu = next(iter(L))["jpg"]
    assert gpu.is_cuda and gpu.dtype == getattr(torch, dtype) and gpu.shape == cpu.shape
    tol = 1e-5 if dtype == "float32" else 2e-2
    assert torch.allclose(gpu.float().cpu(), cpu.float(), rtol=tol, atol=tol)
    # uint8 pixels, the int64 labels and the int64 positions
    assert L.telemetry().to_dict()["transfer"]["bytes"] == 16 * 3 * 96 * 96 + 2 * 16 * 8


def test_the_all_reduce_timer_on_nccl_times_every_bucket_and_keeps_the_gradients(tmp_path):
    import torch.distributed as dist

    from loadscope.telemetry import CommTimer

    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
        timed = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
        timed.load_state_dict(plain.state_dict())
        plain_ddp = torch.nn.parallel.DistributedDataParallel(plain, device_ids=[0])
        timed_ddp = torch.nn.parallel.DistributedDataParallel(timed, device_ids=[0])
        timer = CommTimer(timed_ddp)
        x = torch.randn(64, 512, device="cuda")
        for model in (plain_ddp, timed_ddp):
            model(x).square().mean().backward()
        torch.cuda.synchronize()
        c = timer.take()
        assert c.bytes == sum(p.numel() * 4 for p in timed.parameters()) and c.buckets >= 1 and c.busy > 0
        for a, b in zip(plain.parameters(), timed.parameters()):
            assert torch.equal(a.grad, b.grad)  # the hook does what DDP's default does
        # The host clock against the GPU's: the same steps under torch.profiler, whose NCCL
        # kernels' time is what the GPU spent all-reducing. The timer's busy time holds that,
        # plus the enqueue and the completion's callback on the host.
        from torch.profiler import ProfilerActivity, profile

        timer.take()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                timed_ddp(x).square().mean().backward()
            torch.cuda.synchronize()
        host = timer.take()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "nccl" in e.name.lower()]
        gpu_s = sum(getattr(e, "device_time_total", None) or e.cuda_time_total for e in kernels) * 1e-6  # from µs
        print(f"CommTimer on NCCL: host busy {host.busy * 1e3:.3f} ms over {host.buckets} buckets; "
              f"the profiler's NCCL kernels {gpu_s * 1e3:.3f} ms over {len(kernels)} kernels")
        assert host.buckets >= 20
        # One rank's all-reduce may launch no kernel at all (NCCL copies, or does nothing, for a
        # world of one): then there is nothing on the GPU to compare with, and the line says so.
        if kernels:
            assert host.busy >= gpu_s * 0.9  # the kernels' time, and the enqueue and callback beside it
    finally:
        # The models hold the NCCL process group: freed before it is destroyed. A DDP freed
        # after destroy_process_group (by a later garbage collection) tears down a
        # communicator that is gone: the suspect of the SIGSEGV of 2026-12-04 (docs/gpu.md).
        plain_ddp = timed_ddp = model = timer = None  # noqa: F841
        gc.collect()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def gpu_videos(tmp_path_factory):
    """The videos of the NVDEC checks (loadscope.datasets.gpu_check_videos): the folder
    scripts/gpu-check.sh carries (LOADSCOPE_GPU_VIDEOS: the GPU machine has no ffmpeg CLI to
    make them), else made here."""
    import os
    from pathlib import Path

    from loadscope import datasets

    given = os.environ.get("LOADSCOPE_GPU_VIDEOS")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("gpu_videos")
    datasets.gpu_check_videos(str(out))
    return out


# Stated tolerance between NVDEC's frames and the CPU's: none. Only codecs whose decoding is
# exact by their specification go to NVDEC, and its NV12 is made planar before the CPU path's
# own swscale pass (tests/cpp's [nvdec] case), so any difference is a bug; the printed line says
# how large it is.
NVDEC_MAX_DIFF = 0


def test_nvdec_frames_equal_the_cpu_paths_within_tolerance(gpu_videos):
    import json

    import numpy as np

    from loadscope import _native

    device = torch.cuda.current_device()
    for v in json.loads((gpu_videos / "videos.json").read_text()):
        if not v["nvdec"]:
            continue
        path = str(gpu_videos / v["file"])
        pts = _native.video_index(path)["pts"][::7][:10]
        cpu = np.frombuffer(_native.decode_video_frames(path, pts, 224, 224), np.uint8).astype(np.int16)
        gpu = np.frombuffer(_native.decode_video_frames(path, pts, 224, 224, cuda_device=device), np.uint8)
        diff = np.abs(cpu - gpu)
        print(f"NVDEC against the CPU, {v['file']}: max |diff| {diff.max()}, mean {diff.mean():.4f}, "
              f"identical {float((diff == 0).mean()):.2%}")
        assert diff.max() <= NVDEC_MAX_DIFF, (v["file"], diff.max())


def test_nvdec_clips_through_the_loader_count_and_name_every_cpu_fallback(gpu_videos, tmp_path):
    import json

    videos = json.loads((gpu_videos / "videos.json").read_text())
    manifest = tmp_path / "v.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(gpu_videos / v["file"]), "cls": i}) + "\n"
                                for i, v in enumerate(videos)))

    def clips(**kw):
        loader = ls.Loader(ls.FileList(manifest), fields={"mp4": ls.VideoClip(112, frames=8, stride=3, crop="center", **kw),
                                                          "cls": ls.Int()}, batch_size=len(videos), threads=2, shuffle=False)
        batches = list(loader)
        return torch.cat([b["mp4"] for b in batches]), loader

    cpu, _ = clips()
    gpu, loader = clips(hwaccel="cuda")
    assert gpu.shape == cpu.shape and (gpu.int() - cpu.int()).abs().max() <= NVDEC_MAX_DIFF
    falls = [v for v in videos if not v["nvdec"]]
    video = loader.telemetry().to_dict()["video"]
    assert video["cpu_fallbacks"] == len(falls) and video["gpu_frames"] > 0, video
    notes = {n["key"]: n["reason"] for n in loader.stats()["warning_notes"]}
    for v in falls:  # each named, with why: no NVDEC path for the codec, or a profile it refuses
        reason = next(r for k, r in notes.items() if v["file"] in k or v["file"] in r)
        assert "decoded on the CPU" in reason and v["why"] in reason, (v, reason)
