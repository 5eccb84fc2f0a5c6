"""The filter language: parsing, canonical text, evaluation one message at a time and by column."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakepubsub.errors import InvalidArgument
from lakepubsub.resources.filters import (
    And,
    Equals,
    Expression,
    Filter,
    Has,
    HasPrefix,
    Not,
    NotEquals,
    Or,
    parse_filter,
    parse_label_query,
)

MAP = pa.map_(pa.string(), pa.string())

# The attribute sets of the examples, by message number.
MESSAGES: dict[int, dict[str, str]] = {
    1: {"lang": "en", "name": "com"},
    2: {"lang": "en", "name": "net"},
    3: {"lang": "cn", "name": "org"},
    4: {"lang": "jp", "name": "co"},
    5: {"lang": "jp"},
    6: {"name": "com"},
    7: {"iana.org/language_tag": "en", "name": "com"},
    8: {"iana.org/language_tag": "fr"},
    9: {"\u307f\u3093\u306a": "x"},
    10: {},
}


def matching(text: str) -> set[int]:
    parsed = parse_filter(text)
    return {number for number, attributes in MESSAGES.items() if parsed.matches(attributes)}


def invalid(text: str, parse: Any = parse_filter) -> str:
    with pytest.raises(InvalidArgument) as caught:
        parse(text)
    return caught.value.message


# --- Examples -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", set(MESSAGES)),
        (" \t\n ", set(MESSAGES)),
        ("attributes:name", {1, 2, 3, 4, 6, 7}),
        ("NOT attributes:name", {5, 8, 9, 10}),
        ('attributes.name = "com"', {1, 6, 7}),
        ('attributes.name != "com"', {2, 3, 4, 5, 8, 9, 10}),
        ('hasPrefix(attributes.name, "co")', {1, 4, 6, 7}),
        ('NOT hasPrefix(attributes.name, "co")', {2, 3, 5, 8, 9, 10}),
        ('hasPrefix(attributes.name, "")', {1, 2, 3, 4, 6, 7}),
        ('attributes:"iana.org/language_tag" AND NOT attributes.name = "com"', {8}),
        (
            'attributes:lang AND (attributes.name = "net" OR attributes.name = "org")',
            {2, 3},
        ),
        ('attributes.name = "com" AND -attributes:"iana.org/language_tag"', {1, 6}),
        ('attributes:"\\u307F\\u3093\\u306A"', {9}),
        ("attributes:'\\u307f\\u3093\\u306a'", {9}),
        ('attributes."name" = "com"', {1, 6, 7}),
        ('(NOT attributes:name) OR attributes.name = "co"', {4, 5, 8, 9, 10}),
        ('NOT (attributes:name OR attributes.lang = "jp")', {8, 9, 10}),
        ("NOT NOT attributes:lang", {1, 2, 3, 4, 5}),
        ("--attributes:lang", {1, 2, 3, 4, 5}),
        ("- attributes:lang", {6, 7, 8, 9, 10}),
        ("attributes:lang AND attributes:name AND attributes.lang = 'en'", {1, 2}),
        ("attributes.lang='jp'OR attributes.lang='cn'", {3, 4, 5}),
        ("(((attributes:lang)))", {1, 2, 3, 4, 5}),
        ("NOT(attributes:lang)", {6, 7, 8, 9, 10}),
        ('hasPrefix ( attributes . name , "n" )', {2}),
        ("attributes : lang", {1, 2, 3, 4, 5}),
        ('attributes.Name = "com"', set()),
        ('attributes.name = "COM"', set()),
    ],
)
def test_examples_select_the_documented_messages(text: str, expected: set[int]) -> None:
    assert matching(text) == expected


def test_parse_builds_the_tree() -> None:
    parsed = parse_filter(
        'attributes:a AND NOT (attributes.b = "x" OR hasPrefix(attributes.c, "p")) '
        'AND attributes."d.e" != "y"'
    )
    assert parsed == Filter(
        And(
            (
                Has("a"),
                Not(Or((Equals("b", "x"), HasPrefix("c", "p")))),
                NotEquals("d.e", "y"),
            )
        )
    )


def test_minus_is_a_spelling_of_not() -> None:
    assert parse_filter("-attributes:a") == parse_filter("NOT attributes:a")


def test_parentheses_keep_the_nesting_they_write() -> None:
    nested = parse_filter("attributes:a AND (attributes:b AND attributes:c)")
    assert nested.expression == And((Has("a"), And((Has("b"), Has("c")))))
    assert parse_filter("(attributes:a AND attributes:b)").expression == And((Has("a"), Has("b")))


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        (r'"\\"', "\\"),
        (r'"\""', '"'),
        (r"'\''", "'"),
        (r'"it\'s"', "it's"),
        ("'say \"hi\"'", 'say "hi"'),
        (r'"\a\b\f\n\r\t\v\?\`"', "\a\b\f\n\r\t\v?`"),
        (r'"\x41\X42"', "AB"),
        (r'"\xe9"', "\u00e9"),
        (r'"\u00e9\U0001F600"', "\u00e9\U0001f600"),
        (r'"\101\377"', "A\u00ff"),
        ('"raw\nnewline"', "raw\nnewline"),
        ('""', ""),
    ],
)
def test_string_literal_escapes(literal: str, value: str) -> None:
    assert parse_filter(f"attributes.k = {literal}").expression == Equals("k", value)


def test_empty_filter_matches_everything() -> None:
    empty = parse_filter("")
    assert empty.matches_all
    assert empty == Filter()
    assert str(empty) == ""
    assert empty.matches({})
    assert not parse_filter("attributes:a").matches_all
    assert empty.mask(pa.array([None, {"a": "b"}], type=MAP)).to_pylist() == [True, True]


@pytest.mark.parametrize(
    ("tree", "text"),
    [
        (Has("a-b_c9"), "attributes:a-b_c9"),
        (Has("iana.org/x"), 'attributes:"iana.org/x"'),
        (Has(""), 'attributes:""'),
        (Equals("k", 'q"\\'), 'attributes.k = "q\\"\\\\"'),
        (Equals("k", "\n\x00\u2028\U000e0001"), 'attributes.k = "\\n\\x00\\u2028\\U000E0001"'),
        (Equals("k", "caf\u00e9 \u307f"), 'attributes.k = "caf\u00e9 \u307f"'),
        (NotEquals("k", "v"), 'attributes.k != "v"'),
        (HasPrefix("k", "p"), 'hasPrefix(attributes.k, "p")'),
        (Not(Not(Has("a"))), "NOT NOT attributes:a"),
        (Not(And((Has("a"), Has("b")))), "NOT (attributes:a AND attributes:b)"),
        (
            Or((And((Has("a"), Has("b"))), Has("c"), Or((Has("d"), Has("e"))))),
            "(attributes:a AND attributes:b) OR attributes:c OR (attributes:d OR attributes:e)",
        ),
    ],
)
def test_canonical_text(tree: Expression, text: str) -> None:
    assert str(Filter(tree)) == text
    assert parse_filter(text) == Filter(tree)


def test_and_or_need_two_operands() -> None:
    with pytest.raises(ValueError, match="at least two"):
        And((Has("a"),))
    with pytest.raises(ValueError, match="at least two"):
        Or(())


def test_filters_are_immutable_and_hashable() -> None:
    parsed = parse_filter("attributes:a")
    with pytest.raises(AttributeError):
        parsed.expression = None  # type: ignore[misc]
    assert hash(parsed) == hash(parse_filter("attributes : a"))


# --- Errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'attributes:lang AND attributes.name = "net" OR attributes.name = "org"',
            "character 45: OR cannot follow AND without parentheses",
        ),
        ("attributes:a OR attributes:b AND attributes:c", "character 30: AND cannot follow OR"),
        ('attributes.name = "com" AND ("net" OR "org")', "character 30: a comparison must begin"),
        ('"com" = attributes.name', "character 1: a comparison must begin with an attribute key"),
        (
            "attributes.name = attributes.website",
            "character 19: expected a string literal such as \"value\", found 'attributes'",
        ),
        ("attributes.name = com", "character 19: expected a string literal"),
        ("attributes:\\u307F", "character 12: escape sequences are only allowed inside a quoted"),
        ("attributes:a and attributes:b", "character 14: operators must be uppercase: write 'AND'"),
        ("attributes:a Or attributes:b", "operators must be uppercase: write 'OR'"),
        ("not attributes:a", "character 1: operators must be uppercase: write 'NOT'"),
        ("hasprefix(attributes.a, 'x')", "names are case-sensitive: write 'hasPrefix'"),
        ("Attributes:a", "names are case-sensitive: write 'attributes'"),
        ("attributes:a)", "character 13: ')' has no matching '('"),
        ("(attributes:a", "character 14: expected ')' to close the '(' at character 1"),
        ("()", "character 2: expected '(', '-', 'NOT', 'attributes' or 'hasPrefix', found ')'"),
        ("attributes", "character 11: expected ':' or '.' after 'attributes', found end of filter"),
        ("attributes.", "character 12: expected an attribute key"),
        ("attributes:", "character 12: expected an attribute key"),
        ("attributes.a", "character 13: expected '=' or '!=', found end of filter"),
        ('attributes.a < "x"', "character 14: expected '=' or '!=', found '<'"),
        ('attributes.a == "x"', "character 15: expected a string literal"),
        ('attributes:a = "x"', "character 14: expected 'AND', 'OR' or the end of the filter"),
        ("attributes:a attributes:b", "character 14: expected 'AND', 'OR' or the end"),
        ("attributes:a AND", "character 17: expected '(', '-', 'NOT'"),
        ("NOT", "character 4: expected '(', '-', 'NOT', 'attributes' or 'hasPrefix'"),
        ("NOTattributes:a", "character 1: expected '(', '-', 'NOT'"),
        ('hasPrefix(attributes:a, "x")', "character 21: expected '.'"),
        ('hasPrefix(attributes.a "x")', "character 24: expected ','"),
        ('hasPrefix(attributes.a, "x"', "character 28: expected ')', found end of filter"),
        ('hasPrefix("a", "x")', "expected 'attributes' as the first argument of hasPrefix"),
        ('contains(attributes.a, "x")', "found 'contains'"),
        ('attributes.a = "x', 'character 16: unterminated string literal (missing ")'),
        (
            'attributes.a = "x\\',
            "character 18: unterminated string literal (it ends in a backslash)",
        ),
        ('attributes.a = "\\q"', "character 17: unknown escape sequence \\q"),
        ('attributes.a = "\\x4"', "character 17: escape \\x needs 2 hex digits"),
        ('attributes.a = "\\u12G4"', "escape \\u needs 4 hex digits"),
        ('attributes.a = "\\400"', "unknown escape sequence \\4"),
        ('attributes.a = "\\08"', "an octal escape needs 3 octal digits"),
        ('attributes.a = "\\uD800"', "escape for U+D800 is not a Unicode character"),
        ('attributes.a = "\\U00110000"', "escape for U+110000 is not a Unicode character"),
    ],
)
def test_errors_say_what_was_expected_and_where(text: str, message: str) -> None:
    error = invalid(text)
    assert error.startswith("Invalid filter at character ")
    assert message in error


@pytest.mark.parametrize(
    "text",
    ["(" * 10_000, "NOT " * 10_000, "-" * 10_000, "(" * 60 + "-" * 60 + "attributes:a" + ")" * 60],
)
def test_deep_nesting_is_refused_not_a_stack_overflow(text: str) -> None:
    assert "nests more than 100 levels deep" in invalid(text)


def test_nesting_within_the_limit_parses() -> None:
    text = "(" * 50 + "-" * 49 + "attributes:a" + ")" * 50
    parsed = parse_filter(text)
    assert parse_filter(str(parsed)) == parsed
    assert parsed.matches({}) is True


def test_non_string_input_is_invalid_argument() -> None:
    assert "must be a string, not int" in invalid(cast(str, 5))
    assert "must be a string, not NoneType" in invalid(cast(str, None), parse_label_query)


# --- Label queries --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", None),
        (
            "cloud.googleapis.com/project in (/projects/my-project)",
            Equals("cloud.googleapis.com/project", "/projects/my-project"),
        ),
        (
            'foo.com/device_type in (mobile, "smart tv",tablet)',
            Or(
                (
                    Equals("foo.com/device_type", "mobile"),
                    Equals("foo.com/device_type", "smart tv"),
                    Equals("foo.com/device_type", "tablet"),
                )
            ),
        ),
        ("foo.com/beta", Has("foo.com/beta")),
        ("NOT foo.com/beta", Not(Has("foo.com/beta"))),
        ("k = v AND k2 != 'x y'", And((Equals("k", "v"), NotEquals("k2", "x y")))),
        (
            "NOT region in (eu, us) AND priority",
            And((Not(Or((Equals("region", "eu"), Equals("region", "us")))), Has("priority"))),
        ),
        ('"odd key" = "\\u00e9"', Equals("odd key", "\u00e9")),
    ],
)
def test_label_queries_translate_into_filters(query: str, expected: Expression | None) -> None:
    parsed = parse_label_query(query)
    assert parsed == Filter(expected)
    assert parse_filter(str(parsed)) == parsed


def test_label_query_evaluates_like_its_filter() -> None:
    parsed = parse_label_query("foo.com/device_type in (mobile, tablet) AND NOT foo.com/beta")
    assert str(parsed) == (
        '(attributes."foo.com/device_type" = "mobile" OR '
        'attributes."foo.com/device_type" = "tablet") AND NOT attributes:"foo.com/beta"'
    )
    assert parsed.matches({"foo.com/device_type": "tablet"})
    assert not parsed.matches({"foo.com/device_type": "tablet", "foo.com/beta": ""})
    assert not parsed.matches({"foo.com/device_type": "desktop"})


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("k in ()", "character 7: expected a label value, found ')'"),
        ("k in (a b)", "character 9: expected ',' or ')', found 'b'"),
        ("k in (a,", "character 9: expected a label value, found end of label query"),
        ("k in a", "character 6: expected '('"),
        ("a b", "character 3: expected 'AND' or the end of the label query, found 'b'"),
        ("a OR b", "character 3: expected 'AND' or the end of the label query, found 'OR'"),
        ("= v", "character 1: expected a label key"),
        ("k =", "character 4: expected a label value"),
        ("k = 'v", "character 5: unterminated string literal"),
        ("NOT " * 200 + "k", "more than 100 NOTs in a row"),
    ],
)
def test_label_query_errors(query: str, message: str) -> None:
    error = invalid(query, parse_label_query)
    assert error.startswith("Invalid label query at character ")
    assert message in error


# --- Columns --------------------------------------------------------------------------------


def rows_of(column: Any) -> list[dict[str, str]]:
    return [dict(pairs or ()) for pairs in column.to_pylist()]


def test_mask_over_a_column() -> None:
    column = pa.array([MESSAGES[number] or None for number in sorted(MESSAGES)], type=MAP)
    parsed = parse_filter('attributes:lang AND NOT hasPrefix(attributes.name, "c")')
    mask = parsed.mask(column)
    assert isinstance(mask, pa.BooleanArray)
    assert mask.null_count == 0
    assert mask.to_pylist() == [parsed.matches(row) for row in rows_of(column)]
    kept = [n for n, keep in zip(sorted(MESSAGES), mask.to_pylist(), strict=True) if keep]
    assert kept == [2, 3, 5]


def test_mask_over_chunked_sliced_and_empty_columns() -> None:
    column = pa.array([{"a": "1"}, None, {"b": "2"}, {"a": "2"}, {}], type=MAP)
    parsed = parse_filter('attributes:a OR attributes.b != "2"')
    chunked = pa.chunked_array([column.slice(0, 2), column.slice(2)])
    assert parsed.mask(chunked).to_pylist() == [True, True, False, True, True]
    assert parsed.mask(column.slice(2, 2)).to_pylist() == [False, True]
    assert parsed.mask(pa.chunked_array([], type=MAP)).to_pylist() == []
    assert isinstance(parsed.mask(chunked), pa.BooleanArray)


def test_mask_on_large_string_maps() -> None:
    column = pa.array([{"a": "xy"}, {"b": "x"}], type=pa.map_(pa.large_string(), pa.large_string()))
    assert parse_filter('hasPrefix(attributes.a, "x")').mask(column).to_pylist() == [True, False]


def test_repeated_keys_and_null_values_mean_what_dict_means() -> None:
    rows = [
        [("a", "1"), ("a", "2")],
        [("a", "2"), ("a", "1")],
        [("a", None)],
        [("a", None), ("a", "2")],
    ]
    column = pa.array(rows, type=MAP)

    def mask(text: str) -> list[bool]:
        return cast(list[bool], parse_filter(text).mask(column).to_pylist())

    assert mask('attributes.a = "2"') == [True, False, False, True]
    assert mask('attributes.a != "2"') == [False, True, True, False]
    assert mask("attributes:a") == [True] * 4
    assert mask('hasPrefix(attributes.a, "")') == [True, True, False, True]


def test_mask_refuses_columns_that_are_not_maps() -> None:
    with pytest.raises(TypeError, match="map<string, string>"):
        parse_filter("attributes:a").mask(pa.array(["a"]))
    with pytest.raises(TypeError, match="map<string, string>"):
        parse_filter("attributes:a").mask([{"a": "b"}])


# --- Properties -----------------------------------------------------------------------------
#
# The test's own model of a filter: nested tuples, rendered to text by the test and judged by
# the reference evaluator below, so parser and evaluator are checked against an independent
# reading of the Pub/Sub rules.

KEY_POOL = ["a", "b", "name", "x-y_9", "iana.org/language_tag", "", "caf\u00e9", 'q"\\']
VALUE_POOL = ["", "c", "co", "com", "net", "\n", "\u307f", "'"]
keys = st.one_of(st.sampled_from(KEY_POOL), st.text(max_size=4))
values = st.one_of(st.sampled_from(VALUE_POOL), st.text(max_size=4))

Model = tuple[Any, ...]
leaves: st.SearchStrategy[Model] = st.one_of(
    st.tuples(st.just("has"), keys),
    st.tuples(st.just("eq"), keys, values),
    st.tuples(st.just("ne"), keys, values),
    st.tuples(st.just("prefix"), keys, values),
)


def _extend(children: st.SearchStrategy[Model]) -> st.SearchStrategy[Model]:
    return st.one_of(
        st.tuples(st.just("not"), children),
        st.tuples(st.sampled_from(["and", "or"]), st.lists(children, min_size=2, max_size=3)),
    )


models = st.recursive(leaves, _extend, max_leaves=8)
attribute_maps = st.dictionaries(keys, values, max_size=5)


def reference(model: Model, attributes: Mapping[str, str]) -> bool:
    kind = model[0]
    if kind == "has":
        return model[1] in attributes
    if kind == "eq":
        return model[1] in attributes and attributes[model[1]] == model[2]
    if kind == "ne":
        return not (model[1] in attributes and attributes[model[1]] == model[2])
    if kind == "prefix":
        return model[1] in attributes and attributes[model[1]][: len(model[2])] == model[2]
    if kind == "not":
        return not reference(model[1], attributes)
    results = [reference(child, attributes) for child in model[1]]
    return all(results) if kind == "and" else any(results)


def to_tree(model: Model) -> Expression:
    kind = model[0]
    if kind in ("not", "and", "or"):
        if kind == "not":
            return Not(to_tree(model[1]))
        children = tuple(to_tree(child) for child in model[1])
        return And(children) if kind == "and" else Or(children)
    node = {"has": Has, "eq": Equals, "ne": NotEquals, "prefix": HasPrefix}[kind]
    return cast(Expression, node(*model[1:]))


def escape_char(char: str, quote: str, style: int) -> str:
    if char in (quote, "\\"):
        return "\\" + char
    code = ord(char)
    if style == 0 and char.isprintable():
        return char
    if style == 1 and code < 0o400:
        return f"\\{code:03o}"
    if style == 2 and code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08X}"


@st.composite
def literals(draw: st.DrawFn, text: str) -> str:
    quote = draw(st.sampled_from("\"'"))
    styles = draw(st.lists(st.integers(0, 3), min_size=len(text), max_size=len(text)))
    pairs = zip(text, styles, strict=True)
    body = "".join(escape_char(char, quote, style) for char, style in pairs)
    return quote + body + quote


@st.composite
def render(draw: st.DrawFn, model: Model) -> str:
    def gap() -> str:
        return draw(st.sampled_from(["", " ", "  ", "\t", "\n"]))

    def key(text: str) -> str:
        if re.fullmatch(r"[A-Za-z0-9_-]+", text) and draw(st.booleans()):
            return text
        return draw(literals(text))

    kind = model[0]
    if kind == "has":
        text = f"attributes{gap()}:{gap()}{key(model[1])}"
    elif kind in ("eq", "ne"):
        operator = "=" if kind == "eq" else "!="
        text = f"attributes{gap()}.{gap()}{key(model[1])}{gap()}{operator}{gap()}"
        text += draw(literals(model[2]))
    elif kind == "prefix":
        text = f"hasPrefix{gap()}({gap()}attributes.{key(model[1])}{gap()},{gap()}"
        text += f"{draw(literals(model[2]))}{gap()})"
    elif kind == "not":
        operand = draw(render(model[1]))
        if model[1][0] in ("and", "or"):
            operand = f"({operand})"
        text = draw(st.sampled_from(["NOT ", "NOT\t", "-", "- "])) + operand
    else:
        operator = " AND " if kind == "and" else " OR "
        parts = [draw(render(child)) for child in model[1]]
        text = operator.join(
            f"({part})" if child[0] in ("and", "or") else part
            for part, child in zip(parts, model[1], strict=True)
        )
    if draw(st.integers(0, 5)) == 0:
        text = f"({gap()}{text}{gap()})"
    return text


@st.composite
def rendered_models(draw: st.DrawFn) -> tuple[Model, str]:
    model = draw(models)
    return model, draw(render(model))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(rendered_models(), st.lists(attribute_maps, min_size=1, max_size=6))
def test_parsed_text_evaluates_like_the_reference(
    case: tuple[Model, str], messages: list[dict[str, str]]
) -> None:
    model, text = case
    parsed = parse_filter(text)
    for attributes in messages:
        assert parsed.matches(attributes) == reference(model, attributes), (text, attributes)


@given(models)
def test_canonical_text_round_trips(model: Model) -> None:
    tree = Filter(to_tree(model))
    assert parse_filter(str(tree)) == tree
    assert str(parse_filter(str(tree))) == str(tree)


nullable_values = st.one_of(values, st.none())
map_rows = st.one_of(st.none(), st.lists(st.tuples(keys, nullable_values), max_size=4))


@given(models, st.lists(map_rows, max_size=25), st.data())
def test_mask_equals_matches_row_by_row(
    model: Model, rows: list[list[tuple[str, str | None]] | None], data: st.DataObject
) -> None:
    column: Any = pa.array(rows, type=MAP)
    start = data.draw(st.integers(0, len(rows)))
    column = column.slice(start)
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(column)))
        column = pa.chunked_array([column.slice(0, cut), column.slice(cut)], type=MAP)
    parsed = Filter(to_tree(model))
    expected = [parsed.matches(row) for row in rows_of(column)]
    assert parsed.mask(column).to_pylist() == expected


FILTER_ALPHABET = st.sampled_from(
    [*"()-:.\"'\\=!, \t", "NOT", "AND", "OR", "attributes", "hasPrefix", "a", "x", "\\u", "é"]
)
filterish = st.lists(FILTER_ALPHABET, max_size=30).map("".join)
LABEL_ALPHABET = st.sampled_from([*"()=!,'\"\\ /.", "in", "NOT", "AND", "k", "v"])
labelish = st.lists(LABEL_ALPHABET, max_size=30).map("".join)


@given(st.one_of(st.text(max_size=60), filterish))
def test_any_text_parses_or_raises_invalid_argument(text: str) -> None:
    try:
        parsed = parse_filter(text)
    except InvalidArgument as error:
        assert re.match(r"Invalid filter at character \d+: ", error.message)
    else:
        assert parse_filter(str(parsed)) == parsed


@given(st.one_of(st.text(max_size=60), labelish))
def test_any_text_parses_as_label_query_or_raises_invalid_argument(text: str) -> None:
    try:
        parsed = parse_label_query(text)
    except InvalidArgument as error:
        assert re.match(r"Invalid label query at character \d+: ", error.message)
    else:
        assert parse_filter(str(parsed)) == parsed
