"""An experiment written in Python with loadscope's pytest fixture: the loadscope pipeline must
deliver the DataLoader's samples, with the DataLoader's labels, at any batch size."""


def test_batch_size_does_not_change_the_samples(loadscope_experiment):
    summary = loadscope_experiment({
        "name": "batch_size", "training_repo": ".",
        "pipeline": {"factory": "classifier.data:make_loadscope_loader", "sample_ids": "classifier.data:sample_ids",
                     "train": False},
        "factor": {"name": "batch_size", "values": [32, 64]},
        "run": {"repetitions": 2, "warmup_samples": 64, "samples": 128},
        "criteria": {"min_gain": -1.0},
    })
    assert summary["correctness"]["arms"]["batch_size=64"]["ok"] is True
