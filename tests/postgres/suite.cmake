# The PostgreSQL ledger under test: a throwaway cluster started by
# tools/pg-cluster as a CTest fixture, the fence suite registered a second
# time against it (same binary, EFFECTFENCE_TEST_LEDGER set), and the
# PostgreSQL-only tests. Included from tests/CMakeLists.txt, whose directory
# owns the test binaries (catch_discover_tests must run there).
file(GLOB EFFECTFENCE_PG_INITDB /usr/lib/postgresql/*/bin/initdb)
find_program(BASH_FOR_PG bash)

# One cluster per build tree, on a unix socket in a short path (sockets are
# limited to about 100 bytes), so parallel build trees never share one.
string(SHA1 EFFECTFENCE_PG_TAG "${CMAKE_BINARY_DIR}")
string(SUBSTRING ${EFFECTFENCE_PG_TAG} 0 12 EFFECTFENCE_PG_TAG)
set(EFFECTFENCE_PG_DIR /tmp/effectfence-pg-${EFFECTFENCE_PG_TAG})
set(EFFECTFENCE_PG_URL "postgresql://effectfence@/effectfence?host=${EFFECTFENCE_PG_DIR}")
set(EFFECTFENCE_PG_TOOL ${CMAKE_SOURCE_DIR}/tools/pg-cluster)

add_test(NAME postgres.cluster_start COMMAND ${EFFECTFENCE_PG_TOOL} start ${EFFECTFENCE_PG_DIR})
set_tests_properties(postgres.cluster_start PROPERTIES FIXTURES_SETUP pg_cluster SKIP_RETURN_CODE 77 TIMEOUT 120)

if(NOT EFFECTFENCE_PG_INITDB)
  message(STATUS "PostgreSQL server not found (apt-get install postgresql): the PostgreSQL tests are skipped")
  return()
endif()

add_test(NAME postgres.cluster_stop COMMAND ${EFFECTFENCE_PG_TOOL} stop ${EFFECTFENCE_PG_DIR})
set_tests_properties(postgres.cluster_stop PROPERTIES FIXTURES_CLEANUP pg_cluster)

set(EFFECTFENCE_PG_TEST_PROPERTIES
    ENVIRONMENT "EFFECTFENCE_TEST_LEDGER=${EFFECTFENCE_PG_URL}" FIXTURES_REQUIRED pg_cluster TIMEOUT 300)

# The fence's behavioural suite, unchanged, on PostgreSQL.
# [sqlite_file]: what rests on SQLite's PRAGMA data_version.
catch_discover_tests(fence_tests TEST_PREFIX "postgres.fence_tests: " TEST_SPEC "~[readme]~[sqlite_file]" EXTRA_ARGS --warn NoTests
                     PROPERTIES ${EFFECTFENCE_PG_TEST_PROPERTIES})

# What only the PostgreSQL ledger has: its URL, migrations, errors, SQL.
add_executable(postgres_tests ${CMAKE_CURRENT_SOURCE_DIR}/postgres/postgres_ledger_test.cc)
target_link_libraries(postgres_tests PRIVATE effectfence_catch_main effectfence_fence)
target_include_directories(postgres_tests PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
catch_discover_tests(postgres_tests TEST_PREFIX "postgres: " EXTRA_ARGS --warn NoTests
                     PROPERTIES ${EFFECTFENCE_PG_TEST_PROPERTIES})

# The server frozen (SIGSTOP) mid-decision, through real serve processes: on
# a cluster of its own, since every test connected to a frozen server stops
# with it, and one test at a time on it.
set(EFFECTFENCE_PG_FROZEN_DIR /tmp/effectfence-pgf-${EFFECTFENCE_PG_TAG})
add_test(NAME postgres.frozen_cluster_start COMMAND ${EFFECTFENCE_PG_TOOL} start ${EFFECTFENCE_PG_FROZEN_DIR})
set_tests_properties(postgres.frozen_cluster_start PROPERTIES FIXTURES_SETUP pg_frozen_cluster TIMEOUT 120)
add_test(NAME postgres.frozen_cluster_stop COMMAND ${EFFECTFENCE_PG_TOOL} stop ${EFFECTFENCE_PG_FROZEN_DIR})
set_tests_properties(postgres.frozen_cluster_stop PROPERTIES FIXTURES_CLEANUP pg_frozen_cluster)
add_executable(postgres_frozen_tests
  ${CMAKE_CURRENT_SOURCE_DIR}/postgres/frozen_server.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/postgres/frozen_server_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/integration/serve_process.cc)
target_link_libraries(postgres_frozen_tests PRIVATE
  effectfence_catch_main effectfence_fence nlohmann_json::nlohmann_json Threads::Threads)
target_include_directories(postgres_frozen_tests PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(postgres_frozen_tests PRIVATE EFFECTFENCE_BIN="$<TARGET_FILE:effectfence>")
add_dependencies(postgres_frozen_tests effectfence)
catch_discover_tests(postgres_frozen_tests TEST_PREFIX "postgres_frozen: " EXTRA_ARGS --warn NoTests
                     PROPERTIES ENVIRONMENT "EFFECTFENCE_TEST_LEDGER=postgresql://effectfence@/effectfence?host=${EFFECTFENCE_PG_FROZEN_DIR}"
                                FIXTURES_REQUIRED pg_frozen_cluster RESOURCE_LOCK pg_frozen_cluster TIMEOUT 120)

# The end-to-end suites that take any ledger, again on PostgreSQL, plus the
# replicas test of PostgreSQL's own (real serve and wrap processes).
find_program(NODE_FOR_PG node)
if(NODE_FOR_PG AND EXISTS ${CMAKE_SOURCE_DIR}/tests/e2e/node_modules/@modelcontextprotocol/sdk)
  foreach(suite sdk multiprocess crash postgres)
    add_test(NAME postgres.e2e_${suite}
             COMMAND ${NODE_FOR_PG} --test ${suite}.test.mjs
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/e2e)
    set_tests_properties(postgres.e2e_${suite} PROPERTIES
      ENVIRONMENT "EFFECTFENCE_BIN=$<TARGET_FILE:effectfence>;EFFECTFENCE_TEST_LEDGER=${EFFECTFENCE_PG_URL}"
      FIXTURES_REQUIRED pg_cluster TIMEOUT 180)
  endforeach()
endif()

# The PostgreSQL half of docs/OPERATIONS.md, run with the real psql.
find_program(PSQL_FOR_PG psql)
if(PSQL_FOR_PG AND BASH_FOR_PG)
  add_test(NAME postgres.operations_runbook
           COMMAND ${BASH_FOR_PG} ${CMAKE_SOURCE_DIR}/tests/operations/runbook_postgres_test.sh
                   $<TARGET_FILE:effectfence> $<TARGET_FILE:ops_ledger_fixture> ${PSQL_FOR_PG}
                   ${CMAKE_SOURCE_DIR}/docs/OPERATIONS.md)
  set_tests_properties(postgres.operations_runbook PROPERTIES
    ENVIRONMENT "EFFECTFENCE_TEST_LEDGER=${EFFECTFENCE_PG_URL}" FIXTURES_REQUIRED pg_cluster TIMEOUT 300)
endif()
