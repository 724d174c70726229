"""Source-level analyses of CEL text: device paths and the rewrites built on them."""

from app.cel import syntax


def test_device_paths_record_literal_keys_and_fields() -> None:
    text = 'device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("1"))'
    (path,) = syntax.device_paths(text)
    assert path.keys == ("capacity", "gpu.example.com", "memory")
    assert not path.in_has


def test_a_field_named_device_or_a_function_named_device_is_not_the_variable() -> None:
    assert syntax.device_paths("object.device.driver == device(1)") == []


def test_dynamic_index_ends_the_path_with_an_unknown_key() -> None:
    (path,) = syntax.device_paths('device.attributes[dom + ".com"].model')
    assert path.keys == ("attributes", None)


def test_strings_that_mention_device_are_not_paths() -> None:
    assert syntax.device_paths('"device.driver" == x') == []


def test_unknown_device_field_is_reported_with_its_offset() -> None:
    paths = syntax.device_paths("device.drivr == 'x'")
    assert syntax.unknown_device_field(paths) == ("drivr", 7)


def test_typed_placeholders_keep_the_text_length_and_every_later_position() -> None:
    text = 'device.capacity["a.b"].memory >= "1"'
    typed = syntax.typed_for_checker(text, syntax.device_paths(text))
    assert len(typed) == len(text)
    assert typed.startswith(syntax.PLACEHOLDER_CAPACITY + " ")
    assert typed.endswith('>= "1"')


def test_has_keeps_its_last_field_selection() -> None:
    text = 'has(device.attributes["a.b"].model)'
    typed = syntax.typed_for_checker(text, syntax.device_paths(text))
    assert typed.startswith("has(" + syntax.PLACEHOLDER_ATTRIBUTE_DOMAIN)
    assert typed.endswith(".model)")


def test_optional_domains_turn_unknown_domains_into_empty_maps() -> None:
    text = '"x" in device.attributes["nope"] && device.capacity.dom.m == 1'
    rewritten = syntax.optional_domains(text, syntax.device_paths(text))
    assert rewritten == (
        '"x" in device.attributes[?"nope"].orValue({}) && '
        "device.capacity[?'dom'].orValue({}).m == 1"
    )


def test_expand_bind_rewrites_nested_binds() -> None:
    text = "cel.bind(a, 1, cel.bind(b, a + 1, b * 2)) == 4"
    assert syntax.expand_bind(text) == "[1].map(a, [a + 1].map(b, b * 2)[0])[0] == 4"


def test_fold_constructors_replaces_constant_calls_only() -> None:
    text = 'quantity("1Gi") == x.quantity("2") && quantity(y) == semver("1.0.0")'
    folded = syntax.fold_constructors(text, lambda f, a: f"<{f}:{a}>")
    assert folded == '<quantity:1Gi> == x.quantity("2") && quantity(y) == <semver:1.0.0>'


def test_position_is_one_based() -> None:
    assert syntax.position("ab\ncd", 4) == (2, 2)
