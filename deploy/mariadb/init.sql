-- First start of the compose file's MariaDB (docker-entrypoint-initdb.d):
-- the second shard database and user quota's rights on every quota_* one.
-- (MARIADB_USER/MARIADB_DATABASE already made user quota and quota_0.)
CREATE DATABASE IF NOT EXISTS quota_1 CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
GRANT ALL PRIVILEGES ON `quota%`.* TO 'quota'@'%';
