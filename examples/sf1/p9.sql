-- 2010 Census Summary File 1, P9. Hispanic or Latino, and not Hispanic or Latino by race.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P9: by Hispanic origin
SELECT hispanic, COUNT(*) AS persons
FROM persons
GROUP BY hispanic;

-- P9, not Hispanic: population of each of the 63 race combinations
SELECT white, black, aian, asian, nhpi, other, COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
  AND (white OR black OR aian OR asian OR nhpi OR other)
GROUP BY white, black, aian, asian, nhpi, other;

-- P9, not Hispanic: population of exactly k races
SELECT CAST(white AS INTEGER) + CAST(black AS INTEGER) + CAST(aian AS INTEGER) + CAST(asian AS INTEGER) + CAST(nhpi AS INTEGER) + CAST(other AS INTEGER) AS races, COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
  AND (white OR black OR aian OR asian OR nhpi OR other)
GROUP BY races;

-- P9, not Hispanic: two or more races
SELECT COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
  AND ((white AND (black OR aian OR asian OR nhpi OR other)) OR (black AND (aian OR asian OR nhpi OR other))
   OR (aian AND (asian OR nhpi OR other)) OR (asian AND (nhpi OR other)) OR (nhpi AND other));

-- P9: total
SELECT COUNT(*) AS persons
FROM persons;

