-- 2010 Census Summary File 1, P1. Total population.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P1: total population
SELECT COUNT(*) AS persons
FROM persons;

