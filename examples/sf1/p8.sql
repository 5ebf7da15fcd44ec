-- 2010 Census Summary File 1, P8. Race (detailed).
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P8: population of each of the 63 race combinations
SELECT white, black, aian, asian, nhpi, other, COUNT(*) AS persons
FROM persons
WHERE (white OR black OR aian OR asian OR nhpi OR other)
GROUP BY white, black, aian, asian, nhpi, other;

-- P8: population of exactly k races
SELECT CAST(white AS INTEGER) + CAST(black AS INTEGER) + CAST(aian AS INTEGER) + CAST(asian AS INTEGER) + CAST(nhpi AS INTEGER) + CAST(other AS INTEGER) AS races, COUNT(*) AS persons
FROM persons
WHERE (white OR black OR aian OR asian OR nhpi OR other)
GROUP BY races;

-- P8: two or more races
SELECT COUNT(*) AS persons
FROM persons
WHERE ((white AND (black OR aian OR asian OR nhpi OR other)) OR (black AND (aian OR asian OR nhpi OR other))
   OR (aian AND (asian OR nhpi OR other)) OR (asian AND (nhpi OR other)) OR (nhpi AND other));

-- P8: total
SELECT COUNT(*) AS persons
FROM persons;

