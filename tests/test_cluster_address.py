"""``--cluster`` and ``DaskMeasurer(address)``: an address is checked before anything
connects (exit 2, one line), and the connect timeout is an option, not a fixed 30 s."""

import socket
import time

import pytest

from probsched.cli import main
from probsched.measure.address import cluster_address


@pytest.mark.parametrize(
    "text, want",
    [
        ("tcp://10.0.0.5:8786", "tcp://10.0.0.5:8786"),
        ("10.0.0.5:8786", "tcp://10.0.0.5:8786"),
        ("TLS://head.example.org:1", "tls://head.example.org:1"),
        ("tcp://[::1]:65535", "tcp://[::1]:65535"),
        ("ucx://node_7:8786", "ucx://node_7:8786"),
        ("inproc://10.0.0.5/1234/1", "inproc://10.0.0.5/1234/1"),
    ],
)
def test_good_addresses_are_normalised(text, want):
    assert cluster_address(text) == want


@pytest.mark.parametrize(
    "text, needle",
    [
        ("not-an-address", "no port"),
        ("http://head:8786", "unknown scheme 'http'"),
        ("tcp://256.1.1.1:8786", "'256.1.1.1' is not an IPv4 address"),
        ("tcp://1.2.3.4:99999", "port 99999 is not in 1-65535"),
        ("tcp://1.2.3.4:0", "port 0 is not in 1-65535"),
        ("tcp://head:port", "port 'port' is not a number"),
        ("tcp://head:8786/path", "port '8786/path' is not a number"),
        ("tcp://:8786", "no host"),
        ("tcp://[::g]:8786", "not an IPv6 address"),
        ("tcp://bad host:8786", "'bad host' is not a host name"),
        ("", "empty"),
        ("inproc://", "nothing after"),
    ],
)
def test_bad_addresses_say_what_is_wrong(text, needle):
    with pytest.raises(ValueError, match="cluster address .*" + needle.replace("(", r"\(").replace("[", r"\[")):
        cluster_address(text)


@pytest.mark.parametrize("command", [["tune", "GMM:small"], ["tune-model", "bert_tiny"], ["bench", "--workloads", "GMM:small"]])
@pytest.mark.parametrize("address", ["not-an-address", "http://head:8786", "tcp://256.1.1.1:99999", ""])
def test_the_cli_refuses_a_bad_address_with_one_line(command, address, capsys, tmp_path):
    t = time.monotonic()
    assert main([*command, "--cluster", address, "--db", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t < 10 and "Traceback" not in err
    assert err.count("\n") == 1 and f"cluster address {address!r}" in err
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


def test_cluster_timeout_needs_a_cluster_and_a_positive_number(capsys):
    assert main(["tune", "GMM:small", "--cluster-timeout", "5"]) == 2
    assert "--cluster-timeout applies with --cluster" in capsys.readouterr().err
    assert main(["tune", "GMM:small", "--cluster", "tcp://127.0.0.1:8786", "--cluster-timeout", "0"]) == 2
    assert "--cluster-timeout" in capsys.readouterr().err


def test_nothing_listening_fails_at_once_and_a_silent_scheduler_after_the_timeout(capsys):
    pytest.importorskip("distributed")
    from probsched.measure import DaskMeasurer, MeasureError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    t = time.monotonic()
    with pytest.raises(MeasureError, match="nothing listens at 127.0.0.1"):
        DaskMeasurer(f"tcp://127.0.0.1:{closed}", timeout=20.0)
    assert time.monotonic() - t < 5
    with socket.socket() as silent:  # accepts connections, never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        t = time.monotonic()
        with pytest.raises(MeasureError, match="within 2 s"):
            DaskMeasurer(f"tcp://127.0.0.1:{port}", timeout=2.0)
        assert time.monotonic() - t < 15
        t = time.monotonic()
        assert main(["tune", "GMM:small", "--cluster", f"tcp://127.0.0.1:{port}", "--cluster-timeout", "2", "-q",
                     "--db", ":memory:"]) == 1
        err = capsys.readouterr().err
        assert "within 2 s" in err and "Traceback" not in err and time.monotonic() - t < 20
    with pytest.raises(ValueError, match="timeout must be > 0"):
        DaskMeasurer("tcp://127.0.0.1:8786", timeout=0)
    with pytest.raises(ValueError, match="unknown scheme 'http'"):
        DaskMeasurer("http://127.0.0.1:8786")
