-- 2010 Census Summary File 1, P11. Hispanic or Latino, and not Hispanic or Latino by race, 18 years and over.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P11: by Hispanic origin, 18 and over
SELECT hispanic, COUNT(*) AS persons
FROM persons
WHERE age >= 18
GROUP BY hispanic;

-- P11, not Hispanic: population of each of the 63 race combinations
SELECT white, black, aian, asian, nhpi, other, COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
  AND age >= 18
  AND (white OR black OR aian OR asian OR nhpi OR other)
GROUP BY white, black, aian, asian, nhpi, other;

-- P11, not Hispanic: population of exactly k races
SELECT CAST(white AS INTEGER) + CAST(black AS INTEGER) + CAST(aian AS INTEGER) + CAST(asian AS INTEGER) + CAST(nhpi AS INTEGER) + CAST(other AS INTEGER) AS races, COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
  AND age >= 18
  AND (white OR black OR aian OR asian OR nhpi OR other)
GROUP BY races;

-- P11, not Hispanic: two or more races
SELECT COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
  AND age >= 18
  AND ((white AND (black OR aian OR asian OR nhpi OR other)) OR (black AND (aian OR asian OR nhpi OR other))
   OR (aian AND (asian OR nhpi OR other)) OR (asian AND (nhpi OR other)) OR (nhpi AND other));

-- P11: total 18 and over
SELECT COUNT(*) AS persons
FROM persons
WHERE age >= 18;

