"""scripts/stream_mix.py on a machine without a GPU: bad sizes are refused by name, and
without CUDA it says so and measures nothing (exit 2) rather than timing the CPU."""

import pytest
import torch


@pytest.fixture(scope="module")
def stream_mix(load_script):
    return load_script("stream_mix.py")


@pytest.mark.parametrize("args", [["--elements", "0"], ["--reps", "-1"]])
def test_sizes_must_be_positive(stream_mix, capsys, args):
    with pytest.raises(SystemExit) as e:
        stream_mix.main(args)
    assert e.value.code == 2
    assert "--elements and --reps must be positive" in capsys.readouterr().err


def test_without_cuda_nothing_is_measured(stream_mix, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the no-GPU path on any machine
    out = tmp_path / "mix.json"
    assert stream_mix.main(["--elements", "16", "--json", str(out)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not out.exists()
