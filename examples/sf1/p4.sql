-- 2010 Census Summary File 1, P4. Hispanic or Latino origin.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P4: by Hispanic origin
SELECT hispanic, COUNT(*) AS persons
FROM persons
GROUP BY hispanic;

-- P4: total
SELECT COUNT(*) AS persons
FROM persons;

