"""What a comparison gate (`sam3d compare --fail-on`) fails on, and the comparison's defaults
(docs/benchmark.md, "Comparing runs"); compare.py applies them, the command line offers them."""

# --fail-on: which verdicts make `compare` exit 1.
FAIL_ON = {"slower": ("slower",), "faster": ("faster",), "any": ("slower", "faster")}
# What else a gate (--fail-on) fails on unless --accept names it: a row on one side only, a failed
# result on either side, a side that is not accepted evidence (its folder's NOT-ACCEPTED marker,
# or results outside their own output checks: results/checks.py).
UNMET = {"missing": ("only in A", "only in B"), "failed": ("not comparable (failed)",), "not-accepted": ()}
# The smallest change of B/A that counts, as a share, and the significance level of the test.
MIN_EFFECT = 0.05
ALPHA = 0.05
