-- 2010 Census Summary File 1, PCT12. Sex by single year of age.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- PCT12: sex by age
SELECT sex, CASE WHEN age >= 110 THEN 110 WHEN age >= 105 THEN 105 WHEN age >= 100 THEN 100 ELSE age END AS age_group,
       COUNT(*) AS persons
FROM persons
GROUP BY sex, age_group;

-- PCT12: by sex
SELECT sex, COUNT(*) AS persons
FROM persons
GROUP BY sex;

-- PCT12: total
SELECT COUNT(*) AS persons
FROM persons;

