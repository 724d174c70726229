"""Kubernetes resource.Quantity: the cases are the ones apimachinery's own tests and docs give."""

from fractions import Fraction

import pytest

from app.k8s.quantity import Quantity, QuantityError, parse_quantity, whole_count


@pytest.mark.parametrize(
    ("text", "value", "fmt"),
    [
        ("0", 0, "DecimalSI"),
        ("0n", 0, "DecimalSI"),
        ("0Ki", 0, "BinarySI"),
        ("1", 1, "DecimalSI"),
        ("1Ki", 1024, "BinarySI"),
        ("7Mi", 7 * 1024**2, "BinarySI"),
        ("6Gi", 6 * 1024**3, "BinarySI"),
        ("5Ti", 5 * 1024**4, "BinarySI"),
        ("4Pi", 4 * 1024**5, "BinarySI"),
        ("3Ei", 3 * 1024**6, "BinarySI"),
        ("5n", Fraction(5, 10**9), "DecimalSI"),
        ("4u", Fraction(4, 10**6), "DecimalSI"),
        ("3m", Fraction(3, 1000), "DecimalSI"),
        ("8k", 8000, "DecimalSI"),
        ("7M", 7 * 10**6, "DecimalSI"),
        ("6G", 6 * 10**9, "DecimalSI"),
        ("5T", 5 * 10**12, "DecimalSI"),
        ("2P", 2 * 10**15, "DecimalSI"),
        ("1E", 10**18, "DecimalSI"),
        ("1E-3", Fraction(1, 1000), "DecimalExponent"),
        ("1e3", 1000, "DecimalExponent"),
        ("1.3E+6", 1_300_000, "DecimalExponent"),
        ("12E-3", Fraction(12, 1000), "DecimalExponent"),
        ("0.5e-1", Fraction(5, 100), "DecimalExponent"),
        ("100.035k", 100_035, "DecimalSI"),
        ("0.0005k", Fraction(1, 2), "DecimalSI"),
        ("7.123456M", 7_123_456, "DecimalSI"),
        ("1.01E", 101 * 10**16, "DecimalSI"),
        ("100.035Ki", Fraction(10243584, 100), "BinarySI"),
        ("0.5Mi", 512 * 1024, "BinarySI"),
        (".001", Fraction(1, 1000), "DecimalSI"),
        (".0001k", Fraction(1, 10), "DecimalSI"),
        ("1.", 1, "DecimalSI"),
        ("1.G", 10**9, "DecimalSI"),
        ("+5", 5, "DecimalSI"),
        ("-5Gi", -5 * 1024**3, "BinarySI"),
    ],
)
def test_quantity_parses_to_the_exact_value_and_format_apimachinery_expects(
    text: str, value: Fraction | int, fmt: str
) -> None:
    q = parse_quantity(text)
    assert q.value == value
    assert q.format == fmt


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3.001n", Fraction(4, 10**9)),
        ("1.1E-9", Fraction(2, 10**9)),
        ("0.0000000001", Fraction(1, 10**9)),
        ("0.9n", Fraction(1, 10**9)),
        ("0.00000012345", Fraction(124, 10**9)),
        ("-3.001n", Fraction(-4, 10**9)),
        ("1e-100", Fraction(1, 10**9)),
        ("0e-100", 0),
        ("9Ei", 2**63 - 1),
        ("9223372036854775807Ki", 2**63 - 1),
        ("12E", 12 * 10**18),
    ],
)
def test_quantity_rounds_up_below_one_nano_and_caps_binary_values(
    text: str, value: Fraction | int
) -> None:
    assert parse_quantity(text).value == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        " 1",
        "1 ",
        "10Mo",
        "10Mm",
        "200K",
        "Three",
        "Mi",
        "1,3G",
        "1e1001",
    ],
)
def test_invalid_quantity_raises_quantity_error(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1Ki", "1Ki"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("1.5Gi", "1536Mi"),
        ("1.5", "1500m"),
        ("1080m", "1080m"),
        ("1.08", "1080m"),
        ("0.001T", "1G"),
        ("1000u", "1m"),
        ("5000m", "5"),
        ("300e6", "300e6"),
        (".001e12", "1e9"),
        ("0.001e0", "1e-3"),
        ("1000e-12", "1e-9"),
        ("00", "0"),
        ("1025Ki", "1025Ki"),
        ("-1Ki", "-1Ki"),
        ("-1.5", "-1500m"),
    ],
)
def test_quantity_prints_its_canonical_form(text: str, canonical: str) -> None:
    assert str(parse_quantity(text)) == canonical


def test_binary_quantities_below_1024_print_as_decimal() -> None:
    assert str(Quantity.from_int(5, "BinarySI")) == "5"
    assert str(Quantity(Fraction(1, 2), "BinarySI")) == "500m"
    assert str(Quantity.from_int(1025, "BinarySI")) == "1025"


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("0", "0", 0),
        ("100m", "50m", 1),
        ("50m", "100m", -1),
        ("10000T", "100Gi", 1),
        ("200M", "0.2G", 0),
        ("50M", "50Mi", -1),
        ("1Gi", "1073741824", 0),
    ],
)
def test_quantities_compare_by_value(left: str, right: str, expected: int) -> None:
    a, b = parse_quantity(left), parse_quantity(right)
    assert a.compare(b) == expected
    assert (a == b) == (expected == 0)
    assert (a < b) == (expected < 0)
    assert (a > b) == (expected > 0)


def test_equal_quantities_hash_alike_whatever_their_suffix() -> None:
    assert len({parse_quantity("1Gi"), parse_quantity("1024Mi"), parse_quantity("1073741824")}) == 1


def test_bare_numbers_from_json_parse_as_quantities() -> None:
    assert parse_quantity(2) == parse_quantity("2")
    assert parse_quantity(0.5) == parse_quantity("500m")
    with pytest.raises(QuantityError):
        parse_quantity(True)
    with pytest.raises(QuantityError):
        parse_quantity(float("nan"))


def test_integer_conversions_are_exact_or_refused() -> None:
    assert parse_quantity("50k").as_int() == 50000
    assert parse_quantity("9999999999999999999999999999999999999G").is_integer() is False
    with pytest.raises(QuantityError, match="cannot convert value to integer"):
        parse_quantity("9999999999999999999999999999999999999G").as_int()
    with pytest.raises(QuantityError):
        parse_quantity("1500m").as_int()
    assert parse_quantity("1500m").ceil_int() == 2
    assert parse_quantity("-1500m").ceil_int() == -2
    assert parse_quantity("50.703k").as_approximate_float() == 50703.0


def test_arithmetic_keeps_the_receivers_format_unless_it_is_zero() -> None:
    total = parse_quantity("50k") + parse_quantity("20")
    assert total == parse_quantity("50.02k")
    assert total.format == "DecimalSI"
    assert (parse_quantity("0") + parse_quantity("1Gi")).format == "BinarySI"
    assert str(parse_quantity("1Gi") - parse_quantity("512Mi")) == "512Mi"
    assert parse_quantity("50k").mul(2) == parse_quantity("100000")
    assert (-parse_quantity("1Ki")).sign() == -1


@pytest.mark.parametrize(
    ("raw", "count"),
    [
        ("2", 2),
        (3, 3),
        (4.0, 4),
        ("2000m", 2),
        ("1k", 1000),
        ("0", 0),
        ("0.5", None),
        ("-1", None),
        (-2, None),
        (True, None),
        (None, None),
        ("two", None),
        ([1], None),
    ],
)
def test_a_device_count_is_a_non_negative_whole_quantity(raw: object, count: int | None) -> None:
    # one reader for translation's requests and the ResourceQuota device counts quota reads
    assert whole_count(raw) == count
