# Installing and packaging. `cmake --install` puts the binary, a man page per
# subcommand and the docs under the GNU directories (CMAKE_INSTALL_PREFIX and
# DESTDIR honoured); `cpack -G DEB` packs the same files under /usr, with the
# Debian dependencies dpkg-shlibdeps derives from the libraries the binary
# links. Tests, benchmarks and fuzz harnesses have no install rules.
include(GNUInstallDirs)

# The version the binary prints is the version the package carries.
file(STRINGS ${CMAKE_SOURCE_DIR}/src/cli/version.h version_line REGEX "kVersion = \"")
if(NOT version_line MATCHES "kVersion = \"([^\"]+)\"" OR NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "src/cli/version.h's kVersion (${CMAKE_MATCH_1}) differs from project VERSION ${PROJECT_VERSION}")
endif()

install(TARGETS effectfence RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The man pages are written from the built binary's --help texts, so they
# cannot disagree with it; rewritten whenever the binary changes.
set(EFFECTFENCE_MAN_DIR ${CMAKE_BINARY_DIR}/man)
find_program(EFFECTFENCE_BASH bash REQUIRED)
add_custom_command(
  OUTPUT ${EFFECTFENCE_MAN_DIR}/effectfence.1
  COMMAND ${EFFECTFENCE_BASH} ${CMAKE_SOURCE_DIR}/cmake/man_pages.sh $<TARGET_FILE:effectfence> ${EFFECTFENCE_MAN_DIR}
  DEPENDS effectfence ${CMAKE_SOURCE_DIR}/cmake/man_pages.sh
  COMMENT "Writing the man pages from effectfence --help"
  VERBATIM)
add_custom_target(effectfence_man ALL DEPENDS ${EFFECTFENCE_MAN_DIR}/effectfence.1)
install(DIRECTORY ${EFFECTFENCE_MAN_DIR}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 FILES_MATCHING PATTERN "*.1")

# The docs keep their layout, so the README's links to docs/*.md still work.
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB EFFECTFENCE_DOCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${EFFECTFENCE_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

set(EFFECTFENCE_PACKAGE_MAINTAINER "effectfence maintainers <maintainers@effectfence.invalid>"
    CACHE STRING "The .deb's Maintainer field")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME effectfence)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "make side-effecting agent tool calls run exactly once")
set(CPACK_PACKAGE_DESCRIPTION
    "A fence for the side-effecting tool calls of AI agents (MCP): one attempt of an action runs, duplicates are refused or replayed from a SQLite ledger, every effect is certified.")
set(CPACK_PACKAGE_CONTACT "${EFFECTFENCE_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # needs dpkg-shlibdeps (dpkg-dev)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
include(CPack)
