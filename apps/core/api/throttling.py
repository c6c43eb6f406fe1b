"""Rate limits per access token (or per user for sessions) and per address for anonymous calls."""

from rest_framework.throttling import SimpleRateThrottle


class PrincipalRateThrottle(SimpleRateThrottle):
    scope = "principal"

    def get_cache_key(self, request, view):
        user = getattr(request, "user", None)
        if not user or not user.is_authenticated:
            return None
        token = getattr(request, "auth", None)
        ident = f"token:{token.pk}" if getattr(token, "pk", None) else f"user:{user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AnonymousRateThrottle(SimpleRateThrottle):
    scope = "anon"

    def get_cache_key(self, request, view):
        user = getattr(request, "user", None)
        if user and user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
