"""Stop signals: the first SIGINT/SIGTERM is a request honoured with a checkpoint; the second is not caught."""

import os
import signal

import pytest
from tiny_config import tiny

from rpgrl.trainer import loop
from rpgrl.trainer.checkpoint import latest_checkpoint
from rpgrl.trainer.log import read_metrics
from rpgrl.trainer.rundir import Interrupted, StopSignals


def test_first_signal_is_a_request_second_is_not_caught(capfd):
    # Python's own SIGINT handler, as in a terminal: a shell's background job (pytest run with `&`) starts with
    # SIGINT ignored, and the second signal must then be ignored again, not raise.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.received == signal.SIGTERM  # the process lives on
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)  # second signal: Python's own handler again
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)
    assert "SIGTERM: stopping at the end of this step" in capfd.readouterr().err


def test_a_second_signal_ignored_before_stays_ignored():
    outer = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.received == signal.SIGINT
            os.kill(os.getpid(), signal.SIGINT)  # SIG_IGN restored: nothing happens
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outer)


def test_signal_before_the_first_step_saves_and_stops(tmp_path):
    stop = StopSignals()
    stop.received = signal.SIGTERM  # as if it arrived during the first evaluation
    with pytest.raises(Interrupted) as info:
        loop.train(tiny(), tmp_path / "run", stop=stop)
    assert info.value.exit_code == 143 and info.value.step == 0
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-000000"
    assert read_metrics(tmp_path / "run" / "metrics.jsonl") == []
