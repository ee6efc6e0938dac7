-- the Iceberg catalog's database, beside Airflow's metadata database (same server, same role)
CREATE DATABASE laketide OWNER airflow;
