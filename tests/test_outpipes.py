"""The reader of spawned processes' pipes (``notebook.controller.outpipes``), over real pipes."""

from __future__ import annotations

import logging
import os
import select

import pytest

from ipympi.notebook.controller.outpipes import Chunk, PipeReader


def wait_for(reader: PipeReader, timeout: float = 10.0) -> list[Chunk]:
    ready, _, _ = select.select([reader.fd], [], [], timeout)
    assert ready, "the reader never woke its poller"
    return reader.take()


@pytest.mark.timeout(30)
def test_a_writer_is_never_blocked_and_the_text_keeps_its_order() -> None:
    reader = PipeReader()
    r, w = os.pipe()
    try:
        reader.add(r, 3, "stdout")
        data = "".join(f"{i}\n" for i in range(50000)).encode()  # ~290 KB: many pipes' worth
        os.set_blocking(w, True)
        os.write(w, data)  # would block forever with nobody reading
        chunks = wait_for(reader)
        while sum(len(c.data) for c in chunks) < len(data):
            chunks += wait_for(reader)
        assert b"".join(c.data for c in chunks) == data
        os.write(w, b"end")
        os.close(w)
        w = -1
        rest = wait_for(reader)
        while not any(c.ended for c in rest):
            rest += wait_for(reader)
        assert b"".join(c.data for c in rest) == b"end" and rest[-1].ended
        assert all(c.key == 3 and c.name == "stdout" for c in chunks + rest)
    finally:
        if w >= 0:
            os.close(w)
        reader.close()
        os.close(r)


@pytest.mark.timeout(30)
def test_beyond_the_limit_text_goes_to_the_log_with_one_notice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = PipeReader(limit=1000)
    r, w = os.pipe()
    try:
        for i in range(20):  # written before the reader looks: all read at once
            os.write(w, (f"{i:03d}" + "y" * 96 + "\n").encode())
        os.close(w)
        w = -1
        with caplog.at_level(logging.WARNING):
            reader.add(r, 5, "stdout")
            chunks = wait_for(reader)
            while not any(c.ended for c in chunks):
                chunks += wait_for(reader)
        shown = b"".join(c.data for c in chunks if c.name == "stdout")
        notices = [c.data for c in chunks if c.name == "stderr"]
        assert len(shown) == 1000 and shown.startswith(b"000")
        assert notices == [
            b"[more output of spawned process 5, written while no cell ran, "
            b"went to the kernel's log]\n"
        ]
        logged = caplog.text
        assert "019" + "y" * 96 in logged and "[stdout:5]" in logged
        # a take starts a new allowance
        assert reader.take() == []
    finally:
        if w >= 0:
            os.close(w)
        reader.close()
        os.close(r)
