// Force-included into every C++ file of the wheel's extension (scripts/build-wheel.sh), so that
// the wheel needs no newer libstdc++ than manylinux_2_34's (GCC 11, GLIBCXX_3.4.29).
// GCC 12 gave std::condition_variable::wait(unique_lock&) a new symbol version (3.4.30) when it
// stopped being noexcept, for thread cancellation; the 3.4.11 one, in every libstdc++ since GCC
// 4.5, does the same wait and only differs if pthread_cancel unwinds through it, which loadscope
// never does.
#if defined(__cplusplus)  // (__GLIBCXX__ is not defined yet: this comes before any header)
__asm__(".symver _ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE,"
        "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11");
#endif
