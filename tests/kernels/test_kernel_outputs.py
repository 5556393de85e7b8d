"""OutputCollector: IOPub message contents to Outputs, without a kernel."""

import base64
from pathlib import Path

from kernels.base import Output
from kernels.outputs import ImageSaver, OutputCollector, strip_ansi


def collector(tmp_path, limit_chars=1000):
    return OutputCollector(ImageSaver(tmp_path), limit_chars)


def test_consecutive_stream_chunks_merge_in_arrival_order(tmp_path):
    c = collector(tmp_path)
    c.add("stream", {"name": "stdout", "text": "a\n"})
    c.add("stream", {"name": "stdout", "text": "b\n"})
    c.add("stream", {"name": "stderr", "text": "warn\n"})
    c.add("stream", {"name": "stdout", "text": "c\n"})
    c.add("execute_result", {"data": {"text/plain": "42"}})
    assert c.outputs() == (
        Output("stdout", "a\nb\n"),
        Output("stderr", "warn\n"),
        Output("stdout", "c\n"),
        Output("result", "42"),
    )
    assert c.error_name is None and c.notes() == ()


def test_error_traceback_is_joined_and_stripped_of_ansi(tmp_path):
    c = collector(tmp_path)
    tb = [
        "\x1b[0;31mZeroDivisionError\x1b[0m  Traceback",
        "\x1b[1;32m----> 1\x1b[0m 1/0",
        "ZeroDivisionError: division by zero",
    ]
    c.add("error", {"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": tb})
    (out,) = c.outputs()
    assert out.kind == "error" and "\x1b" not in out.text
    assert out.text == "ZeroDivisionError  Traceback\n----> 1 1/0\nZeroDivisionError: division by zero"
    assert c.error_name == "ZeroDivisionError"


def test_ansi_split_across_stream_chunks_is_stripped(tmp_path):
    c = collector(tmp_path)
    c.add("stream", {"name": "stdout", "text": "\x1b[3"})
    c.add("stream", {"name": "stdout", "text": "1mred\x1b[0m\n"})
    assert c.outputs() == (Output("stdout", "red\n"),)
    assert strip_ansi("plain") == "plain"


def test_images_are_saved_with_unique_names(tmp_path):
    c = collector(tmp_path / "images")
    png = b"\x89PNG\r\n\x1a\nnot really"
    c.add("display_data", {"data": {"image/png": base64.b64encode(png).decode(), "text/plain": "<Image>"}})
    c.add("execute_result", {"data": {"image/svg+xml": "<svg/>", "text/plain": "<SVG>"}})
    first, second = c.outputs()
    assert (first.kind, first.mime, first.text) == ("display", "image/png", "<Image>")
    assert Path(first.path).read_bytes() == png
    assert (second.kind, second.mime) == ("display", "image/svg+xml")
    assert second.path.endswith(".svg") and Path(second.path).read_text() == "<svg/>"
    assert first.path != second.path


def test_text_display_without_image(tmp_path):
    c = collector(tmp_path)
    c.add("display_data", {"data": {"text/plain": "x**2", "text/latex": "$x^2$"}})
    assert c.outputs() == (Output("display", "x**2"),)


def test_text_past_the_limit_is_dropped_and_counted_but_errors_are_kept(tmp_path):
    c = collector(tmp_path, limit_chars=10)
    c.add("stream", {"name": "stdout", "text": "0123456789abc"})
    c.add("stream", {"name": "stdout", "text": "more"})
    c.add("error", {"ename": "ValueError", "evalue": "bad", "traceback": ["ValueError: bad"]})
    assert c.outputs() == (Output("stdout", "0123456789"), Output("error", "ValueError: bad"))
    assert c.notes() == ("Output truncated: 7 more characters were not shown.",)


def test_a_planted_link_is_never_followed_when_an_image_is_saved(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    saver = ImageSaver(tmp_path / "images")
    (tmp_path / "images").mkdir()
    for n in range(1, 4):  # the names the saver will use next
        (tmp_path / "images" / f"{saver._prefix}-{n}.png").symlink_to(victim)
    assert saver.save("image/png", base64.b64encode(b"\x89PNG evil").decode()) is None
    assert victim.read_text() == "keep me"


def test_images_past_the_caps_are_counted_not_kept(tmp_path):
    from kernels.outputs import MAX_IMAGE_BYTES, MAX_IMAGES

    c = collector(tmp_path)
    png = base64.b64encode(b"\x89PNG small").decode()
    for _ in range(MAX_IMAGES + 2):
        c.add("display_data", {"data": {"image/png": png}})
    c.add("display_data", {"data": {"image/png": base64.b64encode(b"x" * (MAX_IMAGE_BYTES + 1)).decode()}})
    c.add("display_data", {"data": {"image/png": "not base64 at all!"}})
    assert len([o for o in c.outputs() if o.path]) == MAX_IMAGES
    assert any("image(s) were not kept" in n for n in c.notes())
