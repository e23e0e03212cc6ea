"""argparse types for numbers typed on the command line: ASCII decimal only, as everywhere
else a person types a number to AwoooP (argparse's ``type=int`` would take ``٥`` as 5)."""

from __future__ import annotations

import argparse

from awooop.domain.numbers import decimal_number, whole_number


def whole(text: str) -> int:
    # Any length: a command's own range check then says what it takes.
    number = whole_number(text, max_digits=100)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return number


def positive_whole(text: str) -> int:
    number = whole(text)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return number


def decimal(text: str) -> float:
    number = decimal_number(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    return number
