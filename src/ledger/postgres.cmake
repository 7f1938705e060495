# The PostgreSQL ledger and the ledger factory, added to effectfence_ledger.
# Included from the top-level CMakeLists.txt right after that target.
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)

# migrations/postgres/NNNN_*.sql, compiled in like the SQLite ones.
file(GLOB EFFECTFENCE_PG_MIGRATIONS CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/migrations/postgres/[0-9][0-9][0-9][0-9]_*.sql)
list(SORT EFFECTFENCE_PG_MIGRATIONS)
set(EMBEDDED_PG ${CMAKE_BINARY_DIR}/generated/embedded_postgres_migrations.cc)
add_custom_command(
  OUTPUT ${EMBEDDED_PG}
  COMMAND ${CMAKE_COMMAND} -DOUT=${EMBEDDED_PG} "-DFILES=${EFFECTFENCE_PG_MIGRATIONS}"
          -DFUNCTION=postgres_migrations -P ${CMAKE_SOURCE_DIR}/tools/embed_migrations.cmake
  DEPENDS ${EFFECTFENCE_PG_MIGRATIONS} ${CMAKE_SOURCE_DIR}/tools/embed_migrations.cmake
  COMMENT "Embedding PostgreSQL migrations"
  VERBATIM)  # FILES is a ;-list: unquoted, the shell would split it into commands

target_sources(effectfence_ledger PRIVATE
  ${CMAKE_SOURCE_DIR}/src/ledger/pg_connection.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/postgres_txn.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/postgres_ledger.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/open_ledger.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/ledger_reader.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/audit_reads.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/history_reads.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/verify_reads.cc
  ${CMAKE_SOURCE_DIR}/src/ledger/ledger_protections.cc
  ${EMBEDDED_PG})
target_link_libraries(effectfence_ledger PUBLIC PkgConfig::LIBPQ)
