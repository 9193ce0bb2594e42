"""What the Hub's refusals say (issue 48: "has no revision 'main'; it has main")."""

from __future__ import annotations

from seatplan.facts.hub import _missing_revision


def test_a_listed_revision_is_not_said_to_be_missing_and_present(rng):
    names = sorted({rng.choice(["main", "v1", "dev", "refs-pr-1"]) for _ in range(rng.randint(1, 4))})
    revision = rng.choice(names)
    said = _missing_revision("org/model", revision, names).message
    assert "lists" in said and "; it has" not in said, said
    other = _missing_revision("org/model", "nope", names).message
    assert other.endswith(", ".join(names)) and "nope" in other
