"""Layer 4: reading results. The result record and its one reader (record.py), statistics (stats.py), the rows
every reading shares (rows.py), the checks that decide acceptance (checks.py), the table
(table.py), the evidence folder (evidence.py) and run-to-run comparison (compare.py). Uses
sam3d.core only: results from any machine (CI artifacts, a GPU run) are read the same way."""
