"""adopt's compose interpolation against compose-go's own interpolation tests (compose-spec/compose-go
``template/template_test.go``, ported case by case: the same mapping FOO=first, BAR empty, the same templates and
results or errors), then random nestings checked against a reference built from the rules."""

from __future__ import annotations

import pytest

from seatplan.adopt.readers.compose_template import TemplateError, substitute

DEFAULTS = {"FOO": "first", "BAR": ""}

SUBSTITUTED = [
    ("$${foo}", "${foo}"),  # TestEscaped
    ("foo", "foo"),  # TestSubstituteNoMatch
    ("a $ string", "a $ string"), ("^REGEX$", "^REGEX$"), ("$}", "$}"), ("$", "$"),  # TestUnescaped
    ("$FOO-bar", "first-bar"),  # TestNonBraced
    ("This ${missing} var", "This  var"), ("This ${BAR} var", "This  var"),  # TestNoValueNoDefault
    ("This $FOO var", "This first var"), ("This ${FOO} var", "This first var"),  # TestValueNoDefault
    ("ok ${missing:-def}", "ok def"), ("ok ${missing-def}", "ok def"),  # TestNoValueWithDefault
    ("ok ${BAR:-def}", "ok def"),  # TestEmptyValueWithSoftDefault
    ("ok ${FOO:-def}", "ok first"),  # TestValueWithSoftDefault
    ("ok ${BAR-def}", "ok "),  # TestEmptyValueWithHardDefault
    ("ok ${UNSET_VAR:+presence_value}", "ok "), ("ok ${UNSET_VAR+presence_value}", "ok "),  # TestPresentValueWithUnset(2)
    ("ok ${FOO:+presence_value}", "ok presence_value"), ("ok ${FOO+presence_value}", "ok presence_value"),
    ("ok ${BAR+presence_value}", "ok presence_value"), ("ok ${BAR:+presence_value}", "ok "),  # TestPresentValue*
    ("ok ${BAR:-/non:-alphanumeric}", "ok /non:-alphanumeric"),  # TestNonAlphanumericDefault
    # TestInterpolationExternalInterference
    ("-ok ${BAR:-defaultValue}", "-ok defaultValue"), ("+ok ${UNSET:-${BAR-defaultValue}}", "+ok "),
    ("-ok ${FOO:-defaultValue}", "-ok first"), (":-ok ${UNSET-defaultValue}", ":-ok defaultValue"),
    (":-ok ${BAR-defaultValue}", ":-ok "), (":?ok ${BAR-defaultValue}", ":?ok "), (":?ok ${BAR:-defaultValue}", ":?ok defaultValue"),
    (":+ok ${BAR:-defaultValue}", ":+ok defaultValue"), ("+ok ${BAR-defaultValue}", "+ok "), ("?ok ${BAR:-defaultValue}", "?ok defaultValue"),
    # TestDefaultsWithNestedExpansion
    ("ok ${UNSET_VAR-$FOO}", "ok first"), ("ok ${UNSET_VAR-${FOO}}", "ok first"), ("ok ${UNSET_VAR-${FOO} ${FOO}}", "ok first first"),
    ("ok ${BAR:-$FOO}", "ok first"), ("ok ${BAR:-${FOO}}", "ok first"), ("ok ${BAR:-${FOO} ${FOO}}", "ok first first"),
    ("ok ${BAR+$FOO}", "ok first"), ("ok ${BAR+$FOO ${FOO:+second}}", "ok first second"),
    # TestDefaultsForMandatoryVariables
    ("ok ${FOO:?err}", "ok first"), ("ok ${FOO?err}", "ok first"), ("ok ${BAR?err}", "ok "),
    # TestPrecedence (the operator is the first after the name)
    ("${UNSET_VAR-myerror?msg}", "myerror?msg"), ("${FOO?bar-baz}", "first"),
    ("${BAR:-default_value_for_empty_var}", "default_value_for_empty_var"),
    ("${UNSET_VAR-default_value_for_unset_var}", "default_value_for_unset_var"),
    # issue 48's cases
    ("${MODEL:-${DEFAULT_MODEL}}", ""), ("${NAME:-${FOO}/q06}", "first/q06"), ("${UNSET:-${UNSET2:-deep}}/x", "deep/x"),
]

ERRORS = [
    *[(template, "Invalid template") for template in ["${", "${}", "${ }", "${ foo}", "${foo }", "${foo!}"]],  # TestInvalid
    # TestMandatoryVariableErrors, …WithNestedExpansion
    ("not ok ${UNSET_VAR:?Mandatory Variable Unset}", "required variable UNSET_VAR is missing a value: Mandatory Variable Unset"),
    ("not ok ${BAR:?Mandatory Variable Empty}", "required variable BAR is missing a value: Mandatory Variable Empty"),
    ("not ok ${UNSET_VAR:?}", "required variable UNSET_VAR is missing a value"),
    ("not ok ${UNSET_VAR?Mandatory Variable Unset}", "required variable UNSET_VAR is missing a value: Mandatory Variable Unset"),
    ("not ok ${UNSET_VAR?}", "required variable UNSET_VAR is missing a value"),
    ("not ok ${UNSET_VAR:?Mandatory Variable ${FOO}}", "required variable UNSET_VAR is missing a value: Mandatory Variable first"),
    ("not ok ${UNSET_VAR?Mandatory Variable ${FOO}}", "required variable UNSET_VAR is missing a value: Mandatory Variable first"),
    ("${UNSET_VAR?bar-baz}", "required variable UNSET_VAR is missing a value: bar-baz"),  # TestPrecedence
]


@pytest.mark.parametrize(("template", "expected"), SUBSTITUTED)
def test_compose_gos_substitutions(template, expected):
    assert substitute(template, DEFAULTS) == expected


@pytest.mark.parametrize(("template", "error"), ERRORS)
def test_compose_gos_errors(template, error):
    with pytest.raises(TemplateError, match="^" + error.replace("$", "\\$").replace("?", "\\?").replace("{", "\\{")):
        substitute(template, DEFAULTS)


def test_an_unset_variable_read_as_empty_is_reported():
    seen: list[str] = []
    assert substitute("a ${X} $Y ${Z:-z} ${FOO}", DEFAULTS, seen.append) == "a   z first"
    assert seen == ["X", "Y"]


def _reference(rng, depth: int, env: dict[str, str]) -> tuple[str, str]:
    """A random template and its value by the rules, built together."""
    if depth == 0 or rng.random() < 0.3:
        text = rng.choice(["a", "x/y", "-", ":", "+", "?", " ", "q06", ""])
        return text, text
    name = rng.choice(["FOO", "BAR", "UNSET", "BASE"])
    operator = rng.choice([":-", "-", ":+", "+", ""])
    word, word_value = _reference(rng, depth - 1, env)
    if operator == "" :
        template, value = "${" + name + "}", env.get(name, "")
    else:
        missing = name not in env or (operator.startswith(":") and env[name] == "")
        template = "${" + name + operator + word + "}"
        value = (word_value if missing else env[name]) if operator in (":-", "-") else ("" if missing else word_value)
    tail, tail_value = _reference(rng, depth - 1, env)
    if "$" in tail or tail.startswith("{"):
        tail, tail_value = "", ""
    return template + tail, value + tail_value


def test_random_nestings_follow_the_rules(rng):
    env = {"FOO": "first", "BAR": "", "BASE": "org/m"}
    for _ in range(500):
        template, expected = _reference(rng, rng.randint(1, 5), env)
        assert substitute(template, env) == expected, template
