-- 2010 Census Summary File 1, PCT12A-O. Sex by single year of age by race and Hispanic origin (A-G: race groups; H: Hispanic; I-O: race groups, not Hispanic).
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- PCT12A-G: sex by age
SELECT sex, CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       CASE WHEN age >= 110 THEN 110 WHEN age >= 105 THEN 105 WHEN age >= 100 THEN 100 ELSE age END AS age_group,
       COUNT(*) AS persons
FROM persons
GROUP BY sex, race, age_group;

-- PCT12A-G: by sex
SELECT sex, CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       COUNT(*) AS persons
FROM persons
GROUP BY sex, race;

-- PCT12A-G: total
SELECT CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       COUNT(*) AS persons
FROM persons
GROUP BY race;

-- PCT12H: sex by age
SELECT sex, CASE WHEN age >= 110 THEN 110 WHEN age >= 105 THEN 105 WHEN age >= 100 THEN 100 ELSE age END AS age_group,
       COUNT(*) AS persons
FROM persons
WHERE hispanic
GROUP BY sex, age_group;

-- PCT12H: by sex
SELECT sex, COUNT(*) AS persons
FROM persons
WHERE hispanic
GROUP BY sex;

-- PCT12H: total
SELECT COUNT(*) AS persons
FROM persons
WHERE hispanic;

-- PCT12I-O: sex by age
SELECT sex, CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       CASE WHEN age >= 110 THEN 110 WHEN age >= 105 THEN 105 WHEN age >= 100 THEN 100 ELSE age END AS age_group,
       COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
GROUP BY sex, race, age_group;

-- PCT12I-O: by sex
SELECT sex, CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
GROUP BY sex, race;

-- PCT12I-O: total
SELECT CASE
         WHEN white AND NOT (black OR aian OR asian OR nhpi OR other) THEN 'White alone'
         WHEN black AND NOT (white OR aian OR asian OR nhpi OR other) THEN 'Black or African American alone'
         WHEN aian AND NOT (white OR black OR asian OR nhpi OR other) THEN 'American Indian and Alaska Native alone'
         WHEN asian AND NOT (white OR black OR aian OR nhpi OR other) THEN 'Asian alone'
         WHEN nhpi AND NOT (white OR black OR aian OR asian OR other) THEN 'Native Hawaiian and Other Pacific Islander alone'
         WHEN other AND NOT (white OR black OR aian OR asian OR nhpi) THEN 'Some Other Race alone'
         ELSE 'Two or more races' END AS race,
       COUNT(*) AS persons
FROM persons
WHERE NOT hispanic
GROUP BY race;

