#!/bin/sh
# Runs once, when the postgres container initialises an empty data volume
# (/docker-entrypoint-initdb.d). Creates the two roles Keeper needs, as config/embedded.py does
# for the embedded server: keeper_owner owns the database and runs the migrations; keeper serves
# web and workers and is NOSUPERUSER NOBYPASSRLS and not the tables' owner, so row-level security
# binds it. pgvector is created here because the owner is not a superuser.
set -eu

: "${KEEPER_OWNER_PASSWORD:?set KEEPER_OWNER_PASSWORD}"
: "${KEEPER_APP_PASSWORD:?set KEEPER_APP_PASSWORD}"
KEEPER_DB="${KEEPER_DB:-keeper}"

psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    -v owner_password="$KEEPER_OWNER_PASSWORD" -v app_password="$KEEPER_APP_PASSWORD" \
    -v db="$KEEPER_DB" <<'SQL'
CREATE ROLE keeper_owner LOGIN CREATEDB NOSUPERUSER PASSWORD :'owner_password';
CREATE ROLE keeper LOGIN NOCREATEDB NOSUPERUSER NOBYPASSRLS PASSWORD :'app_password';
CREATE DATABASE :"db" OWNER keeper_owner;
SQL

psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "$KEEPER_DB" <<'SQL'
CREATE EXTENSION IF NOT EXISTS vector;
GRANT USAGE ON SCHEMA public TO keeper;
-- Tables and sequences the owner creates (migrations) are usable by the application role;
-- no TRUNCATE (row-level security does not filter it).
ALTER DEFAULT PRIVILEGES FOR ROLE keeper_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO keeper;
ALTER DEFAULT PRIVILEGES FOR ROLE keeper_owner IN SCHEMA public
    GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO keeper;
SQL
