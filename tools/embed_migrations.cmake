# Writes a C++ source holding every migrations/NNNN_*.sql file as a string.
# Invoked at build time: cmake -DOUT=... -DFILES=a;b;c [-DFUNCTION=name] -P embed_migrations.cmake
# FUNCTION names the accessor (default embedded_migrations): one per engine.
if(NOT FUNCTION)
  set(FUNCTION embedded_migrations)
endif()
set(body "// Generated from migrations/*.sql by tools/embed_migrations.cmake. Do not edit.\n")
string(APPEND body "#include \"ledger/migrations.h\"\n\nnamespace effectfence {\n\n")
string(APPEND body "const std::vector<Migration>& ${FUNCTION}() {\n  static const std::vector<Migration> all = {\n")
foreach(f ${FILES})
  get_filename_component(name ${f} NAME)
  string(SUBSTRING ${name} 0 4 num)
  math(EXPR num "${num}")
  file(READ ${f} sql)
  string(APPEND body "    {${num}, \"${name}\", R\"effectfence_sql(${sql})effectfence_sql\"},\n")
endforeach()
string(APPEND body "  };\n  return all;\n}\n\n}  // namespace effectfence\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
