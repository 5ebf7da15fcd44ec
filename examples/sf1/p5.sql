-- 2010 Census Summary File 1, P5. Hispanic or Latino origin by race.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P5: Hispanic origin by race
SELECT hispanic, CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       COUNT(*) AS persons
FROM persons
GROUP BY hispanic, race;

-- P5: by Hispanic origin
SELECT hispanic, COUNT(*) AS persons
FROM persons
GROUP BY hispanic;

