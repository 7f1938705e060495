#include <cstdio>
int main() { std::puts("effectfence"); return 0; }
